"""The export benchmark still runs (on 3,000 samples here): it prints each format's peak memory
against the small export's, measured in the same run. The figures are the benchmark's business,
never asserted here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("datasets")

BENCHMARK = Path(__file__).parent.parent / "benchmarks" / "bench_export.py"


def test_the_export_benchmark_runs_and_prints_its_ratios() -> None:
    command = [sys.executable, str(BENCHMARK), "3000"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode in (0, 1), done.stderr
    for export_format in ("jsonl", "parquet", "hf"):
        assert re.search(rf"{export_format}\s+peak .* MiB: ratio [0-9.]+", done.stdout), done.stdout
