"""The showcase: a small Llama learns to call its weather tool, first from an imperfect expert's
traffic (SFT), then from its own traffic scored by a verifier (grouped RL), both through
``reef serve``, evaluated on held-out questions after every artifact.

For each seed it builds the model folder (a Llama from a config, a BPE tokenizer trained on the
task's text, the ChatML template), writes the expert's trajectories and the eval set, then:

1. ``reef import sft.yaml expert.jsonl`` stores the expert's trajectories as uploads, and
   ``reef serve sft.yaml`` trains them with the ``sft`` recipe; every artifact is scored on the
   held-out questions (``evals``);
2. ``reef serve rl.yaml`` serves the SFT stage's last weights; the agent here asks 16 training
   questions 8 times each through the ``openai`` client, scores each reply's tool call,
   reports the scores as groups, and waits for the job they make to be served (on-policy),
   ``--rl-jobs`` times.

It prints one line per seed (held-out accuracy untrained, after SFT, after RL, and the time),
the mean and spread over the seeds, whether the goals held (SFT >= 0.5, RL >= SFT + 0.15), and
draws the eval curves with matplotlib when it is installed (``--plot``). See README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import task  # noqa: E402

from reef.testing.hf_model import make_hf_model_folder  # noqa: E402
from reef.testing.serve import REEF, ServeProcess  # noqa: E402

SCENARIO = "weather"
#: The model: a 4-layer Llama, 0.6 M parameters with the 600-token vocabulary.
MODEL = {
    "model_type": "llama",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}
VOCABULARY = 600
GROUP = 8
QUESTIONS_PER_JOB = 16


def _env(folder: Path) -> dict[str, str]:
    """What ``reef`` runs with: the seed's folder, and this one on the path (``task:verify``)."""
    path = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    return {"LEARN_DIR": str(folder), "PYTHONPATH": path}


class Stage:
    """One ``reef serve`` of a seed's folder, and what the agent and this script ask of it."""

    def __init__(self, deployment: str, folder: Path) -> None:
        self.serve = ServeProcess(HERE / deployment, folder / f"{deployment}.log", env=_env(folder))
        self.base_url = self.serve.base_url
        # The SDK's own retries: a kept-alive connection the service closed while the agent
        # waited for a job is tried again.
        self.client = openai.OpenAI(
            base_url=f"{self.base_url}/scenarios/{SCENARIO}/v1", api_key="unused"
        )

    def trainer(self) -> dict[str, Any]:
        status = httpx.get(f"{self.base_url}/reef/status", timeout=30).json()
        trainer: dict[str, Any] = status["scenarios"][0]["trainers"][0]
        return trainer

    def ended_jobs(self) -> list[dict[str, Any]]:
        answer = httpx.get(
            f"{self.base_url}/reef/scenarios/{SCENARIO}/jobs", params={"limit": 500}, timeout=30
        )
        return [job for job in answer.json()["jobs"] if job["event"]]

    def curve(self) -> list[float]:
        """The held-out score of each evaluated artifact, in the order they were evaluated."""
        answer = httpx.get(
            f"{self.base_url}/reef/scenarios/{SCENARIO}/evaluations",
            params={"limit": 1000},
            timeout=30,
        )
        return [a["scores"]["held_out"] for a in answer.json()["artifacts"]]

    def wait(self, condition: Any, what: str, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for {what}: {self.trainer()}")
            time.sleep(0.2)

    def ask(self, question: task.Question, seed: int) -> tuple[float, str]:
        """One answer, sampled at temperature 1: its score and its record id."""
        raw = self.client.chat.completions.with_raw_response.create(
            model="local",
            messages=[{"role": "user", "content": question.text}],
            max_tokens=96,
            temperature=1.0,
            seed=seed,
        )
        message = raw.parse().choices[0].message
        calls = [
            {"name": c.function.name, "arguments": json.loads(c.function.arguments)}
            for c in message.tool_calls or []
        ]
        reply_is_only_calls = not (message.content or "").strip()
        score = task.score_calls(calls, question) if reply_is_only_calls else 0.0
        return score, raw.headers["x-reef-record-id"]

    def close(self) -> None:
        if self.serve.terminate() != 0:
            raise SystemExit(f"reef serve did not stop cleanly: {self.serve._log_path}")


def sft(folder: Path, train: list[task.Question], calls: int, seed: int) -> list[float]:
    """The SFT stage; returns the eval curve (the untrained weights first)."""
    expert = folder / "expert.jsonl"
    with expert.open("w", encoding="utf-8") as out:
        for row in task.expert_rows(train, calls, seed):
            out.write(json.dumps(row) + "\n")
    imported = subprocess.run(
        [REEF, "import", str(HERE / "sft.yaml"), str(expert), "--scenario", SCENARIO],
        env={**os.environ, **_env(folder)}, capture_output=True, text=True,
    )  # fmt: skip
    if imported.returncode != 0:
        raise SystemExit(f"reef import failed: {imported.stderr}")
    jobs = calls // 4000
    stage = Stage("sft.yaml", folder)
    try:
        stage.wait(lambda: len(stage.ended_jobs()) >= jobs, f"{jobs} SFT jobs", 1800)
        stage.wait(lambda: len(stage.curve()) >= jobs + 1, "the last SFT evaluation")
        curve = stage.curve()
    finally:
        stage.close()
    latest = (folder / "sft" / "artifacts" / "LATEST").read_text().strip()
    (folder / "sft-model").symlink_to(folder / "sft" / "artifacts" / latest.partition(":")[2])
    return curve


def rl(folder: Path, train: list[task.Question], jobs: int, seed: int) -> list[float]:
    """The RL stage; returns the eval curve (the SFT weights first)."""
    rng = random.Random(seed)
    stage = Stage("rl.yaml", folder)
    try:
        stage.wait(lambda: stage.trainer()["served_artifact"] is not None, "the SFT weights")
        with ThreadPoolExecutor(GROUP) as pool:
            for number in range(1, jobs + 1):
                served = stage.trainer()["served_artifact"]
                questions = rng.sample(train, QUESTIONS_PER_JOB)
                asked = [(q, rng.getrandbits(31)) for q in questions for _ in range(GROUP)]
                answers = list(pool.map(lambda a: stage.ask(*a), asked))
                for index, (reward, record_id) in enumerate(answers):
                    group = f"j{number}-q{index // GROUP}"
                    report = {
                        "id": f"{group}-{index % GROUP}",
                        "references": [record_id],
                        "score": reward,
                        "metadata": {"group": group},
                    }
                    answer = httpx.post(
                        f"{stage.base_url}/reef/scenarios/{SCENARIO}/reports",
                        json=report,
                        timeout=30,
                    )
                    answer.raise_for_status()
                stage.wait(lambda n=number: len(stage.ended_jobs()) >= n, f"RL job {number}")
                if stage.ended_jobs()[-1]["metrics"].get("optimizer_steps"):
                    stage.wait(lambda s=served: stage.trainer()["served_artifact"] != s, "weights")
                mean = sum(r for r, _ in answers) / len(answers)
                print(f"  seed {seed} RL job {number}/{jobs}: mean reward {mean:.3f}", flush=True)
        stage.wait(lambda: len(stage.curve()) >= 2 or jobs == 0, "the last RL evaluation")
        curve = stage.curve()
    finally:
        stage.close()
    return curve


def run_seed(root: Path, seed: int, calls: int, rl_jobs: int, held_out: int) -> dict[str, Any]:
    folder = root / f"seed-{seed}"
    folder.mkdir(parents=True)
    started = time.monotonic()
    train, evaluated = task.split(seed, held_out)
    every = train + evaluated
    make_hf_model_folder(
        folder / "model", config=MODEL, seed=seed, text=task.corpus(every), vocab_size=VOCABULARY
    )
    with (folder / "held_out.jsonl").open("w", encoding="utf-8") as out:
        for item in task.eval_items(evaluated):
            out.write(json.dumps(item) + "\n")
    sft_curve = sft(folder, train, calls, seed)
    sft_seconds = time.monotonic() - started
    rl_curve = rl(folder, train, rl_jobs, seed)
    return {
        "seed": seed,
        "untrained": sft_curve[0],
        "sft": sft_curve[-1],
        "rl": rl_curve[-1],
        "sft_curve": sft_curve,
        "rl_curve": rl_curve,
        "sft_seconds": sft_seconds,
        "seconds": time.monotonic() - started,
    }


def spread(values: list[float]) -> str:
    return f"mean {statistics.mean(values):.3f}, min {min(values):.3f}, max {max(values):.3f}"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5))
    for result in results:
        sft_curve, rl_curve = result["sft_curve"], result["rl_curve"]
        points = sft_curve + rl_curve[1:]  # the RL stage's first artifact is the SFT weights
        line = axes.plot(range(len(points)), points, label=f"seed {result['seed']}")[0]
        axes.axvline(len(sft_curve) - 1, color=line.get_color(), alpha=0.2)
    axes.set_xlabel("artifact (SFT, then RL; the faint line: RL starts)")
    axes.set_ylabel("held-out accuracy (greedy)")
    axes.set_ylim(0, 1)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a new folder for the runs")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--expert-calls", type=int, default=16000, help="a multiple of 4,000")
    parser.add_argument("--rl-jobs", type=int, default=20)
    parser.add_argument("--held-out", type=int, default=task.HELD_OUT, help="questions kept out")
    parser.add_argument("--plot", type=Path, help="draw the eval curves here (matplotlib)")
    args = parser.parse_args(argv)
    if args.expert_calls < 4000 or args.expert_calls % 4000:
        parser.error("--expert-calls is a multiple of 4,000 (one SFT job)")
    args.folder.mkdir(parents=True, exist_ok=False)
    results = []
    for seed in args.seeds:
        result = run_seed(args.folder, seed, args.expert_calls, args.rl_jobs, args.held_out)
        results.append(result)
        print(
            f"seed {seed}: held-out accuracy untrained {result['untrained']:.2f}, after SFT"
            f" {result['sft']:.2f}, after RL {result['rl']:.2f}; SFT {result['sft_seconds']:.0f}"
            f" s, in all {result['seconds']:.0f} s",
            flush=True,
        )
    (args.folder / "results.json").write_text(json.dumps(results, indent=1))
    sft_scores = [r["sft"] for r in results]
    gains = [r["rl"] - r["sft"] for r in results]
    print(f"n = {len(results)} seeds")
    print(f"after SFT:       {spread(sft_scores)}")
    print(f"after RL:        {spread([r['rl'] for r in results])}")
    print(f"RL over SFT:     {spread(gains)}")
    print(f"seconds a seed:  {spread([r['seconds'] for r in results])}")
    held = sum(s >= 0.5 and g >= 0.15 for s, g in zip(sft_scores, gains, strict=True))
    print(f"goals (SFT >= 0.50, RL >= SFT + 0.15) held in {held} of {len(results)} seeds")
    if args.plot is not None:
        plot(results, args.plot)
        print(f"eval curves: {args.plot}")
    return 0 if held == len(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
