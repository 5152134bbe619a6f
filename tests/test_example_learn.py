"""The learning showcase (``examples/learn``) runs end to end, small, beside its bare PyTorch
twin (``benchmarks/bench_learning.py``): one seed, one SFT job of the expert's imported
traffic, one RL job of the model's own traffic, each artifact scored on held-out questions by
the example's own verifier.

Whether the model learns (the full run: several seeds, minutes each) is measured by
``examples/learn/run.py`` itself, not here; its README gives the command and the results. This
test keeps the example working: the task's verifier and expert, ``reef import``, both
deployments, the eval curves and the plot.
"""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[1]
LEARN = ROOT / "examples" / "learn"
sys.path.insert(0, str(LEARN))
import task  # noqa: E402

pytestmark = pytest.mark.slow


def test_the_verifier_scores_only_the_one_right_call() -> None:
    question = task.Question(0, "oslo", "friday")
    item = next(task.eval_items([question]))
    right = json.dumps(question.call())
    assert task.verify(right, item) == 1.0
    assert task.verify(json.dumps(question.call("today")), item) == 0.0
    assert task.verify(f"Sure.\n{right}", item) == 0.0  # text beside the call
    assert task.verify(f"{right}\n{right}", item) == 0.0  # the call twice
    assert task.verify("", item) == 0.0


def test_the_expert_errs_on_weekdays_four_times_in_ten_and_never_elsewhere() -> None:
    rng = random.Random(0)
    weekday = task.Question(1, "lima", "monday")
    calls = [task.expert_call(weekday, rng)["arguments"]["day"] for _ in range(2000)]
    assert 0.55 < calls.count("monday") / len(calls) < 0.65
    assert set(calls) == {"monday", "today"}
    assert all(
        task.expert_call(task.Question(2, "rome", "tomorrow"), rng) == task.Question(
            2, "rome", "tomorrow").call() for _ in range(200)
    )  # fmt: skip
    train, held_out = task.split(3)
    assert not set(train) & set(held_out)
    assert len(held_out) == task.HELD_OUT


def test_the_showcase_and_its_bare_twin_run_both_stages(tmp_path: Path) -> None:
    """``benchmarks/bench_learning.py``, small: the showcase's seed through ``reef serve``
    (``run.run_seed``), then the same work in bare PyTorch."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_learning.py"), "--seeds", "0",
         "--folder", str(tmp_path), "--expert-calls", "4000", "--rl-jobs", "1",
         "--held-out", "10"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "wall time, reef / bare:" in done.stdout
    [(seed, reef, bare)] = json.loads((tmp_path / "bench_learning.json").read_text())
    assert seed == 0
    for result in (reef, bare):
        assert len(result["sft_curve"]) == 2  # the untrained weights, the one SFT job's
        assert result["sft_curve"][0] == 0.0
        assert len(result["rl_curve"]) == 2  # the SFT weights, then the RL job's
        assert result["rl_curve"][0] == result["sft"]  # RL starts from the SFT weights
    # The expert's 4,000 trajectories were imported, and one SFT job trained them all; each
    # RL job trained the 128 answers of its round, on the tokens the model sampled.
    folder = tmp_path / "reef" / "seed-0"
    assert [job["samples"] for job in _jobs(folder / "sft.db")] == [4000]
    rl_jobs = _jobs(folder / "rl.db")
    assert [job["samples"] for job in rl_jobs] == [128]
    assert all(job["retokenized_samples"] == 0 for job in rl_jobs)


def test_run_prints_the_spread_and_the_goals_and_draws_the_curves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import run

    def seed_run(root: Path, seed: int, calls: int, rl_jobs: int, held_out: int) -> dict:
        sft, rl = (0.6, 0.8) if seed == 0 else (0.55, 0.6)
        curves = {"sft_curve": [0.0, sft], "rl_curve": [sft, rl]}
        return {"seed": seed, "untrained": 0.0, "sft": sft, "rl": rl, "sft_seconds": 200.0,
                "seconds": 700.0 + seed, **curves}  # fmt: skip

    monkeypatch.setattr(run, "run_seed", seed_run)
    curve = tmp_path / "curve.png"
    assert run.main([str(tmp_path / "runs"), "--seeds", "0", "1", "--plot", str(curve)]) == 1
    out = capsys.readouterr().out
    assert "after SFT:       mean 0.575, min 0.550, max 0.600" in out
    assert "RL over SFT:     mean 0.125, min 0.050, max 0.200" in out
    assert "goals (SFT >= 0.50, RL >= SFT + 0.15) held in 1 of 2 seeds" in out
    assert len(json.loads((tmp_path / "runs" / "results.json").read_text())) == 2
    assert curve.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert run.main([str(tmp_path / "again"), "--seeds", "0"]) == 0


def _jobs(store: Path) -> list[dict[str, object]]:
    with closing(sqlite3.connect(store)) as connection:
        rows = connection.execute("SELECT metrics FROM reef_jobs ORDER BY seq").fetchall()
    return [json.loads(metrics) for (metrics,) in rows]
