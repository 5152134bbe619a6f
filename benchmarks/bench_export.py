"""Exporting a scenario's samples in bounded memory: the peak memory of an export of 100,000
samples against that of an export of 1,000, measured in the same run.

A store of ``LARGE`` trajectory samples (each with a small ATIF trajectory of four steps, a
reward, and a train count) is filled in bulk. Each export runs in a fresh process, which prints
its peak resident memory (``ru_maxrss``) when it is done: first ``SMALL`` samples (the
baseline: the interpreter, SQLAlchemy, pyarrow and one page), then all ``LARGE``. A store read
whole, or a file built in memory, would grow with the samples; a streamed one stays within a
few pages and batches of the baseline. Goal: the large export's peak at most 1.5 times the
small one's, in each format.

    .venv/bin/python benchmarks/bench_export.py [LARGE]
"""

from __future__ import annotations

import itertools
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bulk_samples import insert_samples

from reef.server.export import ExportFilter, export_rows, write_export
from reef.storage import open_database
from reef.storage.tables import sample_trains

SCENARIO = "bench"
TRAINER = "t"
SMALL = 1_000
LARGE = 100_000
GOAL = 1.5


def _body() -> str:
    steps = [
        {"step_id": 1, "source": "system", "message": "You answer questions. " * 8},
        {"step_id": 2, "source": "user", "message": "What is the capital of France? " * 4},
        {"step_id": 3, "source": "agent", "message": "Paris. " * 20, "model_name": "m"},
        {"step_id": 4, "source": "user", "message": "Thanks."},
    ]
    trajectory = {
        "schema_version": "ATIF-v1.8",
        "session_id": "s",
        "agent": {"name": "reef", "version": "0"},
        "steps": steps,
        "extra": {"reef": {"records": [{"id": "r", "artifact_id": "art-1"}]}},
    }
    return json.dumps({"trajectory": trajectory, "reward": 0.5, "source_record_ids": []})


def _fill(url: str, large: int) -> None:
    database = open_database(url)
    insert_samples(
        database,
        large,
        scenario=SCENARIO,
        trainer=TRAINER,
        id_prefix="sample",
        body=_body(),
        commit_tx=1,
        beside=sample_trains,
        beside_row=lambda seq: {"sample_seq": seq, "trainer": TRAINER, "count": 1},
    )
    database.dispose()


def _child(url: str, export_format: str, count: int, output: str) -> None:
    """Export the first ``count`` samples; print the rows written, seconds, peak RSS (KiB)."""
    database = open_database(url)
    where = ExportFilter(reward_min=0.0)  # a filter the rows go through, as a user's would
    rows = itertools.islice(export_rows(database, SCENARIO, where), count)
    started = time.perf_counter()
    written = write_export(rows, export_format, Path(output))  # type: ignore[arg-type]
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"rows": written, "seconds": elapsed, "peak_kib": peak}))


def _measure(url: str, export_format: str, count: int, folder: str) -> dict[str, float]:
    output = (
        f"{folder}/{export_format}-{count}.{'parquet' if export_format == 'parquet' else 'out'}"
    )
    done = subprocess.run(
        [sys.executable, __file__, "--child", url, export_format, str(count), output],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["rows"] == count, result
    return result


def main(count: int) -> int:
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite:///{folder}/bench.db"
        _fill(url, count)
        ok = True
        print(f"export of {SMALL} samples against {count}, each in a fresh process")
        for export_format in ("jsonl", "parquet", "hf"):
            small = _measure(url, export_format, SMALL, folder)
            large = _measure(url, export_format, count, folder)
            ratio = large["peak_kib"] / small["peak_kib"]
            rate = large["rows"] / large["seconds"]
            ok = ok and ratio <= GOAL
            print(
                f"  {export_format:8} peak {small['peak_kib'] / 1024:7.1f} MiB -> "
                f"{large['peak_kib'] / 1024:7.1f} MiB: ratio {ratio:.2f}"
                f" (goal <= {GOAL}); {rate:,.0f} rows/s"
            )
        print("goal met" if ok else "GOAL MISSED")
        return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        _child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else LARGE))
