"""The distilling recipes trained for real through ``reef serve``: the curve of each over jobs.

Both runs start ``reef serve`` on a deployment whose scenario ``word`` is trained by the
``local`` component (a TinyGPT small enough for a CPU) and served by the local engine; an
agent calls it through the OpenAI client, and each round's samples make one job. After each
job the run waits for the new weights to be served, so every reply is the current student's
(on-policy). It prints one line per job and the last job's figure against the first's, the
baseline measured in the same run.

- ``--recipe distill``: a teacher that knows the answer (a TinyGPT trained beforehand to say
  ``ok`` after the question with the answer as context) scores each reply; the agent reports
  every reply with the answer as ``teacher_context``. The figure is the job metric
  ``teacher_kl``, the mean reverse KL from the student to the teacher on the student's own
  tokens at the job's start: it falls as the student learns the teacher's answer.
- ``--recipe openclaw-rl``: two-turn conversations; a scripted judge (a stand-in of the judge
  endpoint, ``reef.testing.engines.judge_engine``) votes +1 when the first reply (one token)
  is printable ASCII, -1 otherwise; the second turn is the first one's next state. The figure is the
  job's mean judged reward (``reward_mean``): it rises as the student learns what the judge
  wants.
- ``--recipe openclaw-hindsight``: OpenClaw-RL's hindsight objective (``hints: true``), in the
  same two-turn conversations; the scripted judge votes +1 on every turn with the answer as its
  hint, and the teacher that reads the hint is the one of ``--recipe distill`` (the hint makes
  the teacher prompt it was trained on). The figure is ``teacher_kl``: it falls as the student
  learns what the hint revealed.

The two distilling runs start from a student that already answers the question, ``ok`` or
``no`` about as often (:func:`_student`), and train exactly the tokens it sampled: a reply cut
at ``max_tokens`` trains no stop token. (Until issue 24 the trainer re-rendered replies and
trained a stop token after every truncated one; from a student of random weights the curve then
fell mostly because the student learned to stop after three tokens, a token it never sampled,
and with the sampled tokens alone it stayed flat: 2.49 -> 2.68, 2.80 -> 2.36, 2.63 -> 2.63 over
8 jobs.)

The agent samples every reply with a seed (``--seed`` says where the seeds start), so the
distillation run gives the same curve each time on the same machine. The OpenClaw runs vary a
little even at one seed: which judged turns a job holds depends on when the judge's votes come
back. Measured over seeds 0 to 9 (n = 10 each), with the criteria ``tests/test_e2e_distill.py``
asserts: distill (4 jobs) passed 10 of 10, its first job's ``teacher_kl`` 1.58 to 5.11 (median
3.02) and its last -0.01 to 0.52 (median 0.05); openclaw-hindsight (6 jobs) passed 10 of 10,
the first two jobs' sum 4.32 to 8.44 (median 6.12), the last two's 2.07 to 4.15 (median 2.95);
openclaw-rl (6 jobs) passed 10 of 10, the first two jobs' sum of mean rewards 0.63 to 1.50
(median 0.94), the last two's 1.63 to 2.00 (median 1.88).

    .venv/bin/python benchmarks/bench_distill.py --recipe distill --jobs 4 [--seed 0]
    .venv/bin/python benchmarks/bench_distill.py --recipe openclaw-rl --jobs 6
    .venv/bin/python benchmarks/bench_distill.py --recipe openclaw-hindsight --jobs 6
"""

from __future__ import annotations

import argparse
import functools
import re
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai

from reef.components.local.component import LocalComponent
from reef.core.job_data import JobData, TrajectorySample
from reef.testing.engines import judge_engine
from reef.testing.samples import exchange
from reef.testing.serve import TINY_GPT_OPTIONS, ServeProcess
from reef.testing.service import serve_on_loopback

SCENARIO = "word"
QUESTION = "Say the word."
CONTEXT = "The word is ok."
#: Samples per job, and the student's learning rate, of each recipe's run. openclaw-rl's job
#: mean is of +1/-1 votes: at 16 a job it swung by about 0.25 from job to job, and at a
#: learning rate of 0.03 the reward often fell back after reaching 1, so the test's comparison
#: of the first two jobs with the last two failed about one run in five; 32 votes a job at
#: 0.015 rose in each measured run. The distilling runs' signal is a per-token reverse KL
#: without a baseline, and AdamW takes full-size steps on it even once student and teacher
#: nearly agree: at 0.01 the student lost its ``o`` or its stop token again from one job to the
#: next (teacher_kl 1.0 -> 3.8); at 0.003 (distill, 16 a job) and 0.001 (hindsight, 24 a job)
#: it fell in each of 3 measured runs (distill 1.96 / 3.26 / 1.85 -> under 0.09 by job 6;
#: hindsight 2.86 / 3.83 / 4.44 -> 0.48 / 1.36 / 1.15).
PER_JOB = {"distill": 16, "openclaw-rl": 32, "openclaw-hindsight": 24}
LEARNING_RATE = {"distill": 0.003, "openclaw-rl": 0.015, "openclaw-hindsight": 0.001}
#: Each run's figure: a job metric, or the job's mean reward.
FIGURE = {"distill": "teacher_kl", "openclaw-rl": "reward_mean", "openclaw-hindsight": "teacher_kl"}

_DEPLOYMENT = """
storage: {{url: "sqlite:///{folder}/reef.db"}}
serving: {{engine: local}}
scenarios:
  word:
    recipe: {recipe}
    pipeline:
      record2sample: {{config: {record2sample}}}
      sample2job: {{config: {{job_samples: {per_job}}}}}
    training:
      component: local
      options:
        state_dir: "{folder}/state"
        batch_size: 4
        learning_rate: {learning_rate}
{model}
"""


def _teacher(folder: Path) -> Path:
    """A TinyGPT that knows the answer: trained to say ``ok`` after the question with the
    answer as context (the teacher prompt ``DistillSamples`` composes)."""
    return _pretrained(
        folder, [exchange(f"{QUESTION}\n\n{CONTEXT}", "ok")] * 8, jobs=30, learning_rate=0.01
    )


def _student(folder: Path) -> Path:
    """The student the distilling runs start from: a TinyGPT that has learned the shape of an
    answer to the question without its context, ``ok`` or ``no`` about as often, as a small
    model that is unsure of what a larger one knows. Distillation is measured from there: a
    student of random weights samples one of some 260 byte tokens, so reverse KL on its own
    samples moves it by tiny steps (its expected gradient on a token is that token's
    probability), and within a few jobs the curve is noise."""
    answers = [exchange(QUESTION, word) for word in ("ok", "no") * 4]
    return _pretrained(folder, answers, jobs=30, learning_rate=0.01)


def _pretrained(
    folder: Path, trajectories: list[dict[str, Any]], *, jobs: int, learning_rate: float
) -> Path:
    """A TinyGPT of the runs' size trained ``jobs`` jobs on ``trajectories``: its model folder."""
    local = LocalComponent.from_config(
        {
            "state_dir": str(folder),
            "d_model": 32,
            "n_layers": 1,
            "n_heads": 2,
            "max_seq_len": 128,
            "batch_size": 8,
            "learning_rate": learning_rate,
            "seed": 1,
        }
    )
    samples = [TrajectorySample(trajectory) for trajectory in trajectories]
    for job in range(jobs):
        outcome = local.wait(local.submit(JobData(f"pretrain:{job}", samples)), timeout=120)
        assert outcome.event == "finished", outcome.error
    local.close()
    return local.publish().path


def _jobs(base_url: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{base_url}/reef/scenarios/{SCENARIO}/jobs", timeout=10)
    answer.raise_for_status()
    jobs: list[dict[str, Any]] = answer.json()["jobs"]
    return jobs


def _status(base_url: str) -> dict[str, Any]:
    trainer: dict[str, Any] = httpx.get(f"{base_url}/reef/status", timeout=10).json()["scenarios"][
        0
    ]["trainers"][0]
    return trainer


def _wait_for(
    condition: Callable[[], bool], what: str, base_url: str, timeout: float = 180
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {_status(base_url)}")
        time.sleep(0.2)


def _client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{base_url}/scenarios/{SCENARIO}/v1", api_key="unused", max_retries=0
    )


def _ask(
    client: openai.OpenAI, messages: list[dict[str, Any]], seed: int, max_tokens: int = 3
) -> tuple[str, str]:
    """One reply, sampled at temperature 1 with ``seed``: the same weights and seed give the
    same reply, so a run's curve is the same each time it runs."""
    raw = client.chat.completions.with_raw_response.create(
        model="local",
        messages=messages,  # type: ignore[arg-type]
        max_tokens=max_tokens,
        temperature=1.0,
        seed=seed,
    )
    return raw.parse().choices[0].message.content or "", raw.headers["x-reef-record-id"]


def _distill_round(base_url: str, number: int, *, seed: int = 0) -> None:
    client = _client(base_url)
    for member in range(PER_JOB["distill"]):
        asked = seed * 100_000 + number * 1000 + member
        _, record_id = _ask(client, [{"role": "user", "content": QUESTION}], asked)
        report = {
            "id": f"r{number}-{member}",
            "references": [record_id],
            "metadata": {"teacher_context": CONTEXT},
        }
        answer = httpx.post(
            f"{base_url}/reef/scenarios/{SCENARIO}/reports", json=report, timeout=30
        )
        assert answer.status_code in (200, 201), answer.text


def _openclaw_round(
    base_url: str, number: int, *, recipe: str = "openclaw-rl", seed: int = 0
) -> None:
    client = _client(base_url)
    for member in range(PER_JOB[recipe]):
        asked = seed * 100_000 + number * 1000 + 2 * member
        messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
        # The binary run judges one token; the hindsight run distils a reply like distill's.
        reply, _ = _ask(client, messages, asked, max_tokens=1 if recipe == "openclaw-rl" else 3)
        # The second turn is the first one's next state: the judge reads it.
        messages += [
            {"role": "assistant", "content": reply},
            {"role": "user", "content": "Thanks. Another one."},
        ]
        _ask(client, messages, asked + 1)


def judged(messages: list[dict[str, Any]]) -> str:
    """The scripted judge: +1 when the assistant's output is printable ASCII, -1 otherwise."""
    found = re.search(
        r"## The assistant's output\n(.*?)\n\n## The next state",
        messages[-1]["content"],
        re.DOTALL,
    )
    output = found.group(1) if found else ""
    good = bool(output) and all(" " <= c <= "~" for c in output)
    return "\\boxed{1}" if good else "\\boxed{-1}"


def hinted(messages: list[dict[str, Any]]) -> str:
    """The scripted hindsight judge: every turn could have been better, and the hint is the
    answer (``CONTEXT``)."""
    del messages
    return f"[HINT_START]{CONTEXT}[HINT_END]\n\\boxed{{1}}"


def run(
    recipe: str, jobs: int, folder: Path, judge_url: str | None = None, *, seed: int = 0
) -> list[float]:
    """Train ``jobs`` jobs of ``recipe``, the agent's replies sampled with seeds from ``seed``;
    returns the figure of each job, in order."""
    metric = FIGURE[recipe]
    judging = (
        f'judge: {{base_url: "{judge_url}", model: judge, votes: 3, timeout_seconds: 10,'
        " attempts: 2, deadline_seconds: 30}, next_state_timeout_seconds: 600, max_staleness: 1"
    )
    play: Callable[[str, int], None]
    model = TINY_GPT_OPTIONS
    if recipe != "openclaw-rl":
        model = f'        model_path: "{_student(folder / "student")}"'
    if recipe == "distill":
        teacher = _teacher(folder / "teacher")
        recipe_section = f'{{class: distill, config: {{teacher: {{model_path: "{teacher}"}}}}}}'
        record2sample = "{max_staleness: 1}"
        play = functools.partial(_distill_round, seed=seed)
    elif recipe == "openclaw-rl":
        recipe_section = "{class: openclaw-rl, config: {objective: binary}}"
        record2sample = f"{{{judging}}}"
        play = functools.partial(_openclaw_round, seed=seed)
    else:
        teacher = _teacher(folder / "teacher")
        recipe_section = (
            "{class: openclaw-rl, config: {objective: hindsight,"
            f' teacher: {{model_path: "{teacher}"}}}}}}'
        )
        record2sample = f"{{{judging}, hints: true}}"
        play = functools.partial(_openclaw_round, recipe=recipe, seed=seed)
    (folder / "state").mkdir(parents=True, exist_ok=True)
    deployment = folder / "deployment.yaml"
    deployment.write_text(
        _DEPLOYMENT.format(
            folder=folder,
            recipe=recipe_section,
            record2sample=record2sample,
            per_job=PER_JOB[recipe],
            learning_rate=LEARNING_RATE[recipe],
            model=model,
        ),
        encoding="utf-8",
    )
    serve = ServeProcess(deployment, folder / "serve.log")
    figures: list[float] = []
    try:
        _wait_for(
            lambda: _status(serve.base_url)["served_artifact"] is not None,
            "the first weights to be served",
            serve.base_url,
        )
        for number in range(jobs):
            served = _status(serve.base_url)["served_artifact"]
            play(serve.base_url, number)
            _wait_for(
                lambda n=number + 1: len([j for j in _jobs(serve.base_url) if j["event"]]) >= n,
                f"job {number + 1} to end",
                serve.base_url,
            )
            job = _jobs(serve.base_url)[-1]
            assert job["event"] == "finished", job
            value = job["metrics"][metric] if metric != "reward_mean" else job["reward_mean"]
            figures.append(float(value))
            print(f"{recipe} job {number + 1}: {metric} {value:.4f}", flush=True)
            # On-policy: the next round is answered by the weights this job trained.
            _wait_for(
                lambda s=served: _status(serve.base_url)["served_artifact"] != s,
                "the new weights to be served",
                serve.base_url,
            )
        assert serve.terminate() == 0
    finally:
        serve.stop()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=tuple(FIGURE), default="distill")
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="where the agent's sampling seeds start (a run's curve "
        "is the same each time with the same seed)",
    )
    arguments = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        if arguments.recipe == "distill":
            figures = run(arguments.recipe, arguments.jobs, Path(folder), seed=arguments.seed)
        else:
            script = judged if arguments.recipe == "openclaw-rl" else hinted
            with serve_on_loopback(judge_engine(script)) as judge:
                figures = run(
                    arguments.recipe,
                    arguments.jobs,
                    Path(folder),
                    f"{judge}/v1",
                    seed=arguments.seed,
                )
    name = FIGURE[arguments.recipe]
    print(
        f"{arguments.recipe}: {name} first {figures[0]:.4f} last {figures[-1]:.4f}"
        f" (last - first {figures[-1] - figures[0]:+.4f})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
