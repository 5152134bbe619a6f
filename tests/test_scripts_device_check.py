"""``scripts/device-check`` on a machine without a GPU: it says so and exits 2; with
``--allow-cpu`` it runs its training and evaluation on the CPU and prints its table. Its GPU
figures are the script's business on a GPU machine, never asserted here."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "device-check"


def run(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *arguments],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=dict(os.environ),
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA GPU")
def test_without_a_gpu_it_says_so_and_exits_2() -> None:
    done = run()
    assert done.returncode == 2, done.stderr
    assert "device-check: no CUDA GPU here" in done.stderr
    assert done.stdout == ""


def test_on_the_cpu_it_trains_scores_and_prints_one_table() -> None:
    done = run("--allow-cpu", "--jobs", "1", "--rounds", "0")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    table = lines[lines.index(next(line for line in lines if line.startswith("CHECK"))) :]
    assert table[1].startswith("device")
    assert table[2].startswith("SFT job 1")
    assert "held-out exact match" in table[2]
    assert table[3].startswith("held-out score")
    assert table[-1].startswith("total")
