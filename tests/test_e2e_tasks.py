"""End to end through ``reef serve`` with the local component: a scripted generator makes small
verifiable string tasks (validated through the generator service: its oracle runs in the
sandbox), task jobs roll them out on the component's own TinyGPT, score each rollout with the
task's verifier and train on them, and the mean verifier reward rises.

The tasks ask for a lowercase word; the verifier scores the share of lowercase letters in the
answer (:mod:`reef.testing.shaped_tasks`), a shaped reward an untrained TinyGPT (random bytes)
gets a little of. A couple of CPU minutes.
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
          generator: "reef.testing.shaped_tasks:LowercaseTasks"
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
    serve = ServeProcess(deployment, tmp_path / "serve.log")
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
