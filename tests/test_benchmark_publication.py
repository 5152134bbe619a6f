"""The publication benchmark still runs: one job against the vLLM stand-in, end to end.

Only that it runs and prints its figures is checked; the latency is the benchmark's business,
printed beside the time to save the weights measured in the same run, never asserted here.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")

BENCHMARK = Path(__file__).parent.parent / "benchmarks" / "bench_publication.py"


def test_the_publication_benchmark_runs_and_prints_its_ratio() -> None:
    command = [sys.executable, str(BENCHMARK), "--engines", "vllm", "--jobs", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert re.search(
        r"vllm\s+\(LoRA adapter\), median of 1: job end -> engine answers with the new artifact"
        r" [0-9.]+ ms; saving the weights [0-9.]+ ms; publication / save [0-9.]+",
        done.stdout,
    ), done.stdout
