"""The service's load benchmark still runs: a short, slow run of it, end to end.

That it runs and reports its figures is checked here (every request answered, none in error),
and one figure is held to a reference: Reef's cpu per request over the bare endpoint's,
measured in the same run, may not grow by more than 25% (the benchmark's ``--cpu-reference``).
Latency and rate are the benchmark's business, printed against the baseline it measures in
the same run, never asserted in a test on this shared machine.
"""

from __future__ import annotations

import argparse
import json
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("uvicorn")

BENCHMARK = Path(__file__).parent.parent / "benchmarks" / "bench_server_load.py"
REFERENCE = BENCHMARK.parent / "server_cpu_reference.json"


def test_the_load_benchmark_runs_and_holds_the_cpu_per_request_to_its_reference() -> None:
    """rule: the per-request cpu check (issue 32): the reference's fixed workload, run as the
    reference says, passes; both targets answered every request in each round."""
    workload = json.loads(REFERENCE.read_text())["workload"]
    command = [sys.executable, str(BENCHMARK), "--rate", str(workload["rate"])]
    command += ["--seconds", str(workload["seconds"]), "--warmup", str(workload["warmup"])]
    command += ["--rounds", "3", "--cpu-reference", str(REFERENCE)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "bare Starlette (baseline):" in out
    assert "Reef (SQLite, synchronous=FULL):" in out
    # Both targets answered every request, without an error, in each round, the second round
    # in the other order.
    assert len(re.findall(r"errors 0, unanswered 0", out)) == 6, out
    assert "round 1 of 3 (bare then reef)" in out
    assert "round 2 of 3 (reef then bare)" in out
    assert re.search(r"Reef \(SQLite, synchronous=FULL\), median of 3 rounds", out)
    assert re.search(r"Reef / bare: answered rate [0-9.]+, p50 [0-9.]+x, p99 [0-9.]+x", out)
    assert re.search(r"goal \(200 req/s, p99 < 50 ms\): (met|NOT met)", out)
    assert re.search(r"cpu per request: Reef [0-9.]+ ms, bare [0-9.]+ ms; Reef / bare", out)
    assert re.search(r"cpu check: Reef / bare [0-9.]+ against the reference [0-9.]+", out)


def rounds_of(ratio: float) -> dict[str, list[dict[str, Any]]]:
    return {
        "reef": [{"cpu_per_request_ms": ratio}] * 3,
        "bare": [{"cpu_per_request_ms": 1.0}] * 3,
    }


def test_the_cpu_check_fails_a_run_dearer_than_its_reference_by_more_than_a_quarter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check_cpu = runpy.run_path(str(BENCHMARK))["check_cpu"]
    reference = tmp_path / "reference.json"
    args = argparse.Namespace(
        rate=200.0, seconds=2.0, warmup=0.5, write_cpu_reference=reference, cpu_reference=None
    )
    assert check_cpu(args, rounds_of(4.0)) == 0  # records 4.0
    args.write_cpu_reference, args.cpu_reference = None, reference
    assert check_cpu(args, rounds_of(4.9)) == 0  # 1.225x
    assert check_cpu(args, rounds_of(5.1)) == 1  # 1.275x
    assert "(limit 5.00): FAILED" in capsys.readouterr().out
    args.rate = 100.0  # another workload: its reference says nothing of this one
    with pytest.raises(SystemExit, match="records the ratio of the workload"):
        check_cpu(args, rounds_of(4.0))
