"""The API formats' benchmark still runs: a short, slow run of it, end to end.

Only that it runs and prints its figures is checked (every call answered, none in error); the
ratios are the benchmark's business, measured against the chat route in the same run, never
asserted in a test on this shared machine.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")

BENCHMARK = Path(__file__).parent.parent / "benchmarks" / "bench_api_formats.py"


def test_the_api_formats_benchmark_runs_and_prints_every_route() -> None:
    command = [sys.executable, str(BENCHMARK), "--rate", "30", "--seconds", "1", "--warmup", "0.5"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for target in ("bare", "chat", "responses", "messages"):
        assert re.search(rf"^{target} +p50 .* calls 30, errors 0", out, re.MULTILINE), out
    assert re.search(r"responses / chat overhead: .* Reef cpu [0-9.]+x", out)
    assert re.search(r"messages / chat overhead: .* Reef cpu [0-9.]+x", out)
    assert re.search(r"goal \(.*\): (met|NOT met)", out)
