"""End to end through ``reef serve`` with the local component: a scripted generator makes small
verifiable string tasks (validated through the generator service: its oracle runs in the
sandbox), task jobs roll them out on the component's own TinyGPT, score each rollout with the
task's verifier and train on them, and the mean verifier reward rises.

The tasks ask for a lowercase word; the verifier scores the share of lowercase letters in the
answer (:mod:`doubles.shaped_tasks`), a shaped reward an untrained TinyGPT (random bytes)
gets a little of. A couple of CPU minutes.

A second test reads ``GET /reef/status`` of a ``reef serve`` whose scripted generator is held,
then fails once, then makes a generation that waits to train (under a minute).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef.testing.serve import ServeProcess

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup does)"
)

#: The generators these deployments name are Reef's test doubles: `reef serve` imports them
#: from reef-core's tests folder (pytest puts it on this process's path, not a child's).
DOUBLES = {"PYTHONPATH": str(Path(__file__).resolve().parents[1] / "reef-core" / "tests")}
SCENARIO = "lower"
JOBS = 16

DEPLOYMENT = """
storage: {{url: "sqlite:///{folder}/reef.db"}}
generator:
  tasks_root: "{folder}/tasks"
  containers: {{timeout_seconds: 20, memory_mb: 256}}
scenarios:
  lower:
    recipe:
      class: generated_tasks
      config:
        job_parameters:
          rollout:
            rollouts_per_task: 8
            agent: {{max_tokens: 4, temperature: 1.0}}
            sandbox: {{timeout_seconds: 20, memory_mb: 256}}
    pipeline:
      record2sample:
        config:
          generator: "doubles.shaped_tasks:LowercaseTasks"
          generator_config: {{tasks_per_generation: 2}}
          jobs_per_round: 1
          refill_tasks: 2
          rounds: {rounds}
      sample2job: {{config: {{job_samples: 1, buffer_size: 1}}}}
    training:
      component: local
      options:
        state_dir: "{folder}/state"
        d_model: 32
        n_layers: 1
        n_heads: 2
        max_seq_len: 128
        batch_size: 16
        learning_rate: 0.03
"""


def finished_jobs(base_url: str) -> list[dict[str, Any]]:
    page = httpx.get(
        f"{base_url}/reef/scenarios/{SCENARIO}/jobs", params={"limit": 100}, timeout=10
    ).json()
    return [job for job in page["jobs"] if job["event"] == "finished"]


def test_task_jobs_train_on_generated_tasks_and_the_verifier_reward_rises(
    tmp_path: Path,
) -> None:
    # rule: P-TASK-14 — task jobs roll out on the component's own sampler and train groups;
    # rule: P-TASK-12 — each train task of a generation goes to the pipeline and trains.
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(DEPLOYMENT.format(folder=tmp_path, rounds=JOBS // 2), encoding="utf-8")
    serve = ServeProcess(deployment, tmp_path / "serve.log", env=DOUBLES)
    try:
        deadline = time.monotonic() + 420
        jobs = finished_jobs(serve.base_url)
        while len(jobs) < JOBS and time.monotonic() < deadline:
            time.sleep(1)
            jobs = finished_jobs(serve.base_url)
        status = httpx.get(f"{serve.base_url}/reef/status", timeout=10).json()
        assert len(jobs) >= JOBS, (status, (tmp_path / "serve.log").read_text()[-3000:])
    finally:
        serve.terminate()
    # The history keeps a job's scalar metrics: its rollouts' mean reward, the rollouts trained.
    rewards = [job["metrics"]["mean_reward"] for job in jobs[:JOBS]]
    assert all(job["metrics"]["samples"] == 8 for job in jobs[:JOBS]), jobs
    assert status["scenarios"][0]["trainers"][0]["pipeline"]["task_store"]["train_tasks"] >= JOBS
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last > first + 0.15, rewards


STATUS_DEPLOYMENT = """
storage: {{url: "sqlite:///{folder}/reef.db"}}
scenarios:
  sums:
    recipe: generated_tasks
    pipeline:
      record2sample:
        config:
          generator: "doubles.generators:ArithmeticTasks"
          generator_config:
            tasks_per_generation: 2
            failing_generate_calls: 1
            hold_path: "{folder}/hold"
          generation_attempts: 1
          refill_tasks: 2
          rounds: 2
      sample2job: {{config: {{job_samples: 4, buffer_size: 4}}}}
    training:
      component: local
      options:
        state_dir: "{folder}/state"
        d_model: 16
        n_layers: 1
        n_heads: 2
        max_seq_len: 64
"""


def trainer_status(base_url: str) -> dict[str, Any]:
    (scenario,) = httpx.get(f"{base_url}/reef/status", timeout=10).json()["scenarios"]
    (trainer,) = scenario["trainers"]
    return dict(trainer)


def wait_for(base_url: str, done: Any, what: str, log: Path) -> dict[str, Any]:
    """The trainer's status once ``done(status)`` holds (a minute at most)."""
    deadline = time.monotonic() + 60
    status = trainer_status(base_url)
    while not done(status):
        assert time.monotonic() < deadline, (what, status, log.read_text()[-3000:])
        time.sleep(0.2)
        status = trainer_status(base_url)
    return status


def test_get_status_shows_the_generation_in_flight_then_the_task_store_and_waiting_tasks(
    tmp_path: Path,
) -> None:
    # rule: P-TASK-25 — GET /reef/status shows the generator, the generation in flight, the
    # completed generations and the last error, the task store's counts, and the waiting
    # tasks among the trainer's ready samples.
    (tmp_path / "state").mkdir()
    (tmp_path / "hold").touch()  # the scripted generator waits while this file exists
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(STATUS_DEPLOYMENT.format(folder=tmp_path), encoding="utf-8")
    log = tmp_path / "serve.log"
    serve = ServeProcess(deployment, log, env=DOUBLES)
    try:
        held = wait_for(
            serve.base_url,
            lambda s: s["pipeline"].get("task_generation", {}).get("generation_in_flight"),
            "generation 1 in flight",
            log,
        )
        assert held["pipeline"]["task_generation"] == {
            "generator": "doubles.generators:ArithmeticTasks",
            "generation_in_flight": 1,
            "completed_generations": 0,
            "rounds": 0,
            "source_sessions_waiting": 0,
            "last_error": None,
        }
        assert held["pipeline"]["task_store"]["train_tasks"] == 0
        (tmp_path / "hold").unlink()
        # The first generate call fails: its round ends with the error, the next one makes
        # generation 1.
        done = wait_for(
            serve.base_url,
            lambda s: (
                s["pipeline"]["task_generation"]["completed_generations"] == 1
                and s["ready_samples"] == 2
            ),
            "generation 1 complete",
            log,
        )
        generation = done["pipeline"]["task_generation"]
        assert generation["generation_in_flight"] is None
        assert "scripted failure of generate call 1" in generation["last_error"]
        store = done["pipeline"]["task_store"]
        assert (store["train_tasks"], store["eval_tasks"], store["waiting_tasks"]) == (2, 0, 2)
        assert store["candidates"] == 2
        assert done["running_job"] is None  # two waiting tasks: fewer than a job's four
        assert serve.terminate() == 0
    finally:
        serve.stop()
