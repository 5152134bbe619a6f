"""The distilling recipes end to end through ``reef serve``, trained for real by the local
component: ``benchmarks/bench_distill.py`` runs the loop (a TinyGPT student served by the
local engine, an agent through the OpenAI client) and prints each job's figure; these tests
assert the direction of its curve.

- on-policy distillation toward a teacher that knows the answer: the reverse KL from the
  student to the teacher (``teacher_kl``) falls over the jobs;
- OpenClaw-RL with a scripted judge: the mean judged reward rises over the jobs;
- OpenClaw-RL's hindsight objective, with a scripted judge whose hint is the answer and a teacher
  that knows what the hint means: the reverse KL to that hinted teacher falls over the jobs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("starlette")

BENCHMARK = Path(__file__).parent.parent / "benchmarks" / "bench_distill.py"


def _curve(recipe: str, jobs: int) -> list[float]:
    command = [sys.executable, str(BENCHMARK), "--recipe", recipe, "--jobs", str(jobs)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = [float(v) for v in re.findall(rf"{recipe} job \d+: \w+ (-?[0-9.]+)", done.stdout)]
    assert len(figures) == jobs, done.stdout
    return figures


def test_distillation_lowers_the_kl_to_a_teacher_that_knows_the_answer() -> None:
    kl = _curve("distill", 4)
    assert kl[-1] < kl[0] / 2, kl


def test_openclaw_rl_raises_the_judged_reward() -> None:
    reward = _curve("openclaw-rl", 6)
    assert sum(reward[-2:]) > sum(reward[:2]), reward


def test_openclaw_hindsight_lowers_the_kl_to_the_hinted_teacher() -> None:
    kl = _curve("openclaw-hindsight", 6)
    assert sum(kl[-2:]) < sum(kl[:2]), kl
