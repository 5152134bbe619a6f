"""The quickstart's agent and grader: talk to ``reef serve`` through the ``openai`` client, score
each answer, post the scores as reports, and watch the model learn.

The task: the user asks for the magic letter, ``r`` (for reef), in a reply of one token, and
the answer scores 1 when it is exactly ``r``, else 0. No partial credit: credit for a letter
close to ``r`` made the policy settle on a neighbour (``o``, ``u``) in about one run of three,
while with this reward no other answer is worth settling on; the untrained model samples ``r``
about once in 140 answers, enough for the group-relative policy gradient to find it. A word is
not learnt yet by this small model: see ``docs/trainer.md``.
Each round asks the same question ``group_size`` times; the reports of one round share a
comparison group (``metadata.group``), which is what the grouped recipe trains on.

Every answer names the artifact (weights) that gave it (``system_fingerprint`` from the local
engine; from vLLM, the adapter's name in ``model``); the reward curve is the mean reward of the
answers of each artifact, in the order they were served. While it runs it prints a progress
line whenever a job ends (jobs trained of the total, elapsed time, ETA). A job whose groups
each scored all alike has nothing to learn from and leaves the weights as they were, so the same
artifact answers on. The run stops once the trainer has ended ``--jobs`` jobs, prints the
scenario's status and the curves (reward per artifact, training loss per job, from the job
history) as text, and draws them as a PNG (:mod:`plot`).

Against a deployment with tokens, give it one with the ``infer``, ``feedback`` and ``admin``
scopes (it reads the status and the job history) with ``--token`` or in ``$REEF_TOKEN``; a
service that refuses the token stops it at once, saying so. With the ``metrics`` scope too it
prints a few of the service's metrics at the end; without, why it cannot.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plot import ArtifactPoint, progress_line, text_curve, write_png

TARGET = "r"
QUESTION = "What is the magic letter?"
SYSTEM = "You answer with one letter."


def score(answer: str) -> float:
    """1.0 when ``answer`` is exactly ``TARGET``, else 0.0."""
    return float(answer == TARGET)


def ask(client: openai.OpenAI) -> Any:
    """One episode: ask the question; the raw response (with Reef's record id header)."""
    return client.chat.completions.with_raw_response.create(
        model="reef-local",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
        max_tokens=len(TARGET),  # the reply is cut at the target's length: no stop to learn
        temperature=1.0,
    )


def has_exited(pid: int) -> bool:
    """Whether process ``pid`` is gone, or ended and not yet reaped by its parent."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:  # the state follows the command's closing parenthesis: Z for a zombie
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def bearer(token: str | None) -> dict[str, str]:
    """The ``Authorization`` header of ``token`` (none without one)."""
    return {"authorization": f"Bearer {token}"} if token else {}


def wait_for_service(
    base_url: str,
    timeout: float,
    serve_pid: int | None = None,
    serve_log: Path | None = None,
    token: str | None = None,
) -> None:
    """Until ``GET /reef/status`` answers and the trainer has published its first weights;
    when ``serve_pid`` is the ``reef serve`` process and it exits first, say so at once, with
    the end of its log ``serve_log``."""
    print(f"waiting for reef serve at {base_url} to publish its first weights", flush=True)
    started = time.monotonic()
    deadline = started + timeout
    while time.monotonic() < deadline:
        if serve_pid is not None and has_exited(serve_pid):
            said = ""
            if serve_log is not None and serve_log.is_file():
                tail = serve_log.read_text(errors="replace").strip().splitlines()[-5:]
                said = f"; the end of its log ({serve_log}):\n" + "\n".join(tail)
            raise SystemExit(f"reef serve exited before it came up at {base_url}{said}")
        try:
            answer = httpx.get(f"{base_url}/reef/status", headers=bearer(token), timeout=5)
            if answer.status_code in (401, 403):
                said = answer.json().get("message", answer.text)
                how = "give one with --token or in REEF_TOKEN" if not token else "check it"
                raise SystemExit(
                    f"reef serve at {base_url} refused the agent's token ({said}): it needs a"
                    f" token with the infer, feedback and admin scopes; {how}"
                )
            if _trainer(answer.json())["served_artifact"]:
                print(f"[{time.monotonic() - started:6.1f}s] reef serve is up", flush=True)
                return
        except (httpx.HTTPError, KeyError, IndexError, ValueError):
            pass
        time.sleep(0.5)
    where = f"; see its log, {serve_log}" if serve_log is not None else ""
    raise SystemExit(f"reef serve did not come up at {base_url} within {timeout} s{where}")


def _trainer(status: Any) -> Any:
    """The (only) trainer's part of a ``GET /reef/status`` answer."""
    return status["scenarios"][0]["trainers"][0]


def _job_losses(http: httpx.Client, scenario: str) -> list[float | None]:
    """The training loss of each job that ended, oldest first (``None`` for one that failed)."""
    page = http.get(f"/reef/scenarios/{scenario}/jobs", params={"limit": 500})
    page.raise_for_status()
    return [
        job["metrics"].get("loss") if job["event"] == "finished" else None
        for job in page.json()["jobs"]
        if job["event"] is not None
    ]


def run(args: argparse.Namespace) -> int:
    base_url = args.base_url.rstrip("/")
    token = args.token or os.environ.get("REEF_TOKEN") or None
    wait_for_service(base_url, args.startup_timeout, args.serve_pid, args.serve_log, token)
    client = openai.OpenAI(
        base_url=f"{base_url}/scenarios/{args.scenario}/v1",
        api_key=token or "not-needed",  # sent as the bearer token
        max_retries=5,
    )
    http = httpx.Client(base_url=base_url, headers=bearer(token), timeout=30)
    artifacts: list[str] = []  # in the order they first answered
    rewards: dict[str, list[float]] = {}
    answers: list[str] = []  # every answer, in order
    scores: list[float] = []  # the reward of each
    started = time.monotonic()
    group = 0
    trained = 0
    print(f"training {args.jobs} jobs (at most {args.time_limit:.0f} s)", flush=True)
    while trained < args.jobs and time.monotonic() - started < args.time_limit:
        # The round's answers are asked for at once, as an agent's parallel rollouts would be.
        with ThreadPoolExecutor(max_workers=4) as pool:
            answered = list(pool.map(lambda _: ask(client), range(args.group_size)))
        for member, raw in enumerate(answered):
            completion = raw.parse()
            record_id = raw.headers["x-reef-record-id"]
            answer = completion.choices[0].message.content or ""
            reward = score(answer)
            artifact = completion.system_fingerprint or completion.model or "unknown"
            if artifact not in rewards:
                artifacts.append(artifact)
                rewards[artifact] = []
            rewards[artifact].append(reward)
            answers.append(answer)
            scores.append(reward)
            report = {
                "id": f"{args.run_id}-g{group}-m{member}",
                "references": [record_id],
                "score": reward,
                "metadata": {"group": f"{args.run_id}-g{group}"},
            }
            response = http.post(f"/reef/scenarios/{args.scenario}/reports", json=report)
            response.raise_for_status()
        group += 1
        ended = _trainer(http.get("/reef/status").json())["jobs_ended"] or 0
        if ended != trained:
            trained = ended
            recent = rewards[artifacts[-1]]
            print(
                f"{progress_line(trained, args.jobs, time.monotonic() - started)}; "
                f"artifact {len(artifacts) - 1} answers with mean reward "
                f"{sum(recent) / len(recent):.3f}, last answer {answer!r}",
                flush=True,
            )
    status = http.get("/reef/status").json()
    print("\n== status ==")
    print(json.dumps(status, indent=2))
    print_metrics(http, base_url)
    points = [
        ArtifactPoint(i, len(rewards[a]), sum(rewards[a]) / len(rewards[a]))
        for i, a in enumerate(artifacts)
    ]
    losses = _job_losses(http, args.scenario)
    print()
    print("\n".join(text_curve(points, losses)))
    print()
    print(write_png(Path(args.plot), points, losses))
    last = 3 * args.group_size  # the last three rounds
    tail = scores[-last:]
    print(
        f"mean reward: {points[0].mean_reward:.3f} (initial weights) -> "
        f"{sum(tail) / len(tail):.3f} (last {len(tail)} answers)"
    )
    hits = sum(answer == TARGET for answer in answers[-last:])
    print(f"the last {len(tail)} answers hold the target {TARGET!r} {hits} times")
    if trained < args.jobs:
        print(f"stopped at the time limit after {trained} jobs", file=sys.stderr)
        return 1
    return 0


#: The metrics the quickstart shows of all ``GET /metrics`` gives (docs/observe.md lists them).
SHOWN_METRICS = ("reef_jobs_total", "reef_trained_tokens_total", "reef_trainer_ready_samples")


def print_metrics(http: httpx.Client, base_url: str) -> None:
    """Where the service's Prometheus metrics are, and a few of them."""
    print(f"\n== metrics: {base_url}/metrics (Prometheus' text format; docs/observe.md) ==")
    answer = http.get("/metrics")
    if answer.status_code != 200:
        print(answer.json()["message"])
        return
    for line in answer.text.splitlines():
        if line.startswith(SHOWN_METRICS):
            print(line)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the agent and grader (see the module's documentation)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8000")
    parser.add_argument("--scenario", default="magic-word")
    parser.add_argument("--group-size", type=int, default=8, help="answers per comparison group")
    parser.add_argument("--jobs", type=int, default=150, help="stop after this many trained jobs")
    parser.add_argument("--time-limit", type=float, default=480, help="seconds, at most")
    parser.add_argument("--startup-timeout", type=float, default=120)
    parser.add_argument("--serve-pid", type=int, help="the reef serve process, watched at start")
    parser.add_argument("--serve-log", type=Path, help="its log, shown when it exits at start")
    parser.add_argument(
        "--token", help="a bearer token with the infer, feedback and admin scopes ($REEF_TOKEN)"
    )
    parser.add_argument("--run-id", default=f"run{int(time.time())}")
    parser.add_argument("--plot", default="reward_curve.png", help="where the PNG goes")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
