"""Records through a ReportSamples recipe, from push to stored samples, per second.

Appends agent sessions (calls of bench_storage_records.py's generator, then a report on each
session's last call) to the record store, reads them back with the store's cursor and pushes them
to a ReportSamples pipeline, which stores one sample per report with its consumed records. The
figure is records per second from push to stored samples, printed beside the raw-insert baseline
measured in the same run: RecordStore.append of the same calls, one transaction each, as
bench_storage_records.py measures it (its generator and fill are imported, not copied).

    .venv/bin/python benchmarks/bench_pipeline_push.py [--database-url URL]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from reef.core.records import InferenceRecord, Record, Report
from reef.core.trajectory_index import TrajectoryIndex
from reef.pipeline_context import PipelineContext
from reef.recipe.grouped.processor import GroupedJobData
from reef.record2sample import ReportSamples
from reef.storage import RecordStore, TrainerSamples, open_database
from reef.testing.storage import postgres_schema_url
from reef.train.pipeline import TrainingPipeline

_spec = importlib.util.spec_from_file_location(
    "bench_storage_records", Path(__file__).with_name("bench_storage_records.py")
)
assert _spec is not None
assert _spec.loader is not None
storage_bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(storage_bench)

SESSIONS = 150
SCENARIO = storage_bench.SCENARIO


def sessions(prefix: str, n: int) -> list[Record]:
    """``n`` sessions of the storage benchmark's calls, each followed by its report."""
    source = storage_bench.calls(prefix)
    records: list[Record] = []
    for s in range(n):
        session = [next(source) for _ in range(storage_bench.CALLS_PER_TRAJECTORY)]
        records += session
        records.append(Report(f"{prefix}report-{s}", SCENARIO, (session[-1].id,), score=1.0))
    return records


def raw_insert_per_second(store: RecordStore, records: list[Record]) -> float:
    """The baseline: each call appended with its link entry, one transaction per record."""
    index = TrajectoryIndex()
    calls = [r for r in records if isinstance(r, InferenceRecord)]
    started = time.perf_counter()
    for call in calls:
        store.append(call, link=index.add(call))
    return len(calls) / (time.perf_counter() - started)


def pipeline_per_second(database_url: str, records: list[Record]) -> float:
    """Append, read back and push every record; stop when every report's sample is stored."""
    database = open_database(database_url)
    store = RecordStore(database, SCENARIO)
    index = TrajectoryIndex()
    store.append_many(
        [(r, index.add(r) if isinstance(r, InferenceRecord) else None) for r in records]
    )
    context = PipelineContext(SCENARIO, "c")
    pipeline = TrainingPipeline(
        ReportSamples(context),
        GroupedJobData(context, job_samples=1),
        samples=TrainerSamples(database, SCENARIO),
        context=context,
    )
    started = time.perf_counter()
    cursor = None
    while batch := store.read_after(cursor, limit=500):
        cursor = batch[-1].position
        pipeline.push_many([s.record for s in batch if s.record is not None])
    elapsed = time.perf_counter() - started
    stored = TrainerSamples(database, SCENARIO).untrained("c")
    assert len(stored) == SESSIONS, len(stored)
    database.dispose()
    return len(records) / elapsed


@contextlib.contextmanager
def url(base: str | None, name: str) -> Iterator[str]:
    if base is None:
        with tempfile.TemporaryDirectory() as folder:
            yield f"sqlite:///{folder}/{name}.db"
        return
    with postgres_schema_url(base) as schema_url:
        yield schema_url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="a PostgreSQL URL (default: SQLite files)")
    args = parser.parse_args()
    with url(args.database_url, "raw") as raw_url:
        database = open_database(raw_url)
        raw = raw_insert_per_second(RecordStore(database, SCENARIO), sessions("raw", SESSIONS))
        database.dispose()
    with url(args.database_url, "pipeline") as pipeline_url:
        pushed = pipeline_per_second(pipeline_url, sessions("pipe", SESSIONS))
    print(f"raw insert (RecordStore.append, one transaction each): {raw:9.0f} records/s")
    print(f"push -> stored samples through ReportSamples:          {pushed:9.0f} records/s")
    print(f"ratio pipeline / raw insert: {pushed / raw:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
