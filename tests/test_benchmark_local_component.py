"""The local component's benchmark still runs: one short round, end to end.

Only that it runs and prints its figures is checked; its speed is the benchmark's business,
printed against the bare loop it measures in the same run, never asserted in a test.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

BENCHMARK = Path(__file__).parent.parent / "benchmarks" / "bench_local_component.py"


def test_the_component_benchmark_runs_and_prints_its_ratio() -> None:
    command = [sys.executable, str(BENCHMARK), "--models", "tiny-gpt", "--samples", "16",
               "--rounds", "1", "--per-run", "16"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr
    assert re.search(
        r"tiny-gpt\s+16-sample jobs: component / bare, median of 1: wall [0-9.]+ .*cpu [0-9.]+;"
        r" goal >= 0.8: (met|NOT met)",
        done.stdout,
    ), done.stdout
