"""The startup benchmark still runs: one round of it, end to end.

Only that it runs and prints its figures is checked; the ratio is the benchmark's business,
measured against its baseline in the same run, never asserted in a test on this shared machine.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).parent.parent / "benchmarks" / "bench_cli_startup.py"


def test_the_startup_benchmark_runs_and_prints_both_commands_and_the_ratio() -> None:
    command = [sys.executable, str(BENCHMARK), "--rounds", "1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for name in ("baseline", "check"):
        for clock in ("cpu", "wall"):
            assert re.search(rf"^{name} +{clock} +median +[0-9.]+ ms", out, re.MULTILINE), out
    assert re.search(r"^check / baseline: cpu [0-9.]+x, wall [0-9.]+x$", out, re.MULTILINE)
    assert re.search(r"goal \(.*\): (met|NOT met)", out)
