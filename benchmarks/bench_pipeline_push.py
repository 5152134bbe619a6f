"""Records through a ReportSamples recipe, from storing them to stored samples, per second.

Agent sessions (calls of bench_storage_records.py's generator, then a report on each session's
last call; its generator is imported, not copied). The baseline stores every record:
RecordStore.append, one transaction each, as admission without batching does. The pipeline's
clock holds the same work, the same 1,650 appends, and then what the trainer adds: it reads
the records back with the store's cursor and pushes them to a ReportSamples pipeline, which
stores one sample per report with its consumed records (150 more transactions). Both figures
are records per second, measured in the same run; the ratio is what the pipeline costs on top
of storing the records.

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


def store_each(store: RecordStore, records: list[Record]) -> None:
    """Each record appended (a call with its link entry), one transaction per record."""
    index = TrajectoryIndex()
    for record in records:
        store.append(
            record, link=index.add(record) if isinstance(record, InferenceRecord) else None
        )


def raw_insert_per_second(store: RecordStore, records: list[Record]) -> float:
    """The baseline: storing every record, one transaction each."""
    started = time.perf_counter()
    store_each(store, records)
    return len(records) / (time.perf_counter() - started)


def pipeline_per_second(database_url: str, records: list[Record]) -> float:
    """Store every record as the baseline does, read them back and push them; stop when every
    report's sample is stored."""
    database = open_database(database_url)
    store = RecordStore(database, SCENARIO)
    context = PipelineContext(SCENARIO, "c")
    pipeline = TrainingPipeline(
        ReportSamples(context),
        GroupedJobData(context, job_samples=1),
        samples=TrainerSamples(database, SCENARIO),
        context=context,
    )
    started = time.perf_counter()
    store_each(store, records)
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
    print(f"store each record (one transaction each):             {raw:9.0f} records/s")
    print(f"the same, then read back and pushed to stored samples: {pushed:9.0f} records/s")
    print(f"ratio (store + pipeline) / store: {pushed / raw:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
