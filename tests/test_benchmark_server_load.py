"""The service's load benchmark still runs: a short, slow run of it, end to end.

Only that it runs and reports its figures is checked here (every request answered, none in
error); its speed is the benchmark's business, printed against the baseline it measures in
the same run, never asserted in a test on this shared machine.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")

BENCHMARK = Path(__file__).parent.parent / "benchmarks" / "bench_server_load.py"


def test_the_load_benchmark_runs_and_prints_both_targets() -> None:
    command = [sys.executable, str(BENCHMARK), "--rate", "40", "--seconds", "1", "--warmup", "0.5"]
    command += ["--rounds", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "bare Starlette (baseline):" in out
    assert "Reef (SQLite, synchronous=FULL):" in out
    # Both targets answered every request, without an error, in each round, the second round
    # in the other order.
    assert len(re.findall(r"errors 0, unanswered 0", out)) == 4, out
    assert "round 1 of 2 (bare then reef)" in out
    assert "round 2 of 2 (reef then bare)" in out
    assert re.search(r"Reef \(SQLite, synchronous=FULL\), median of 2 rounds", out)
    assert re.search(r"Reef / bare: answered rate [0-9.]+, p50 [0-9.]+x, p99 [0-9.]+x", out)
    assert re.search(r"goal \(40 req/s, p99 < 50 ms\): (met|NOT met)", out)
