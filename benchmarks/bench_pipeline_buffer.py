"""ready() and build_job_data(): does their cost grow with the samples that already trained?

Fills one store with 1,000 trained samples and another with 1,000,000 (bulk Core inserts of
trained rows, not measured), adds the same untrained samples to both, then measures a trainer's
step on a fresh pipeline of each: ready(job_samples), build_job_data(job_samples) and release.
Goal: the large store's cost within 1.5x of the small one's.

    .venv/bin/python benchmarks/bench_pipeline_buffer.py [--database-url URL] [--trained N]

Without --database-url it runs on SQLite files in a temporary folder. With a PostgreSQL URL each
store gets its own schema, dropped afterwards.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator

from bulk_samples import insert_samples

from reef.core.job_data import TrajectorySample, sample_body
from reef.pipeline_context import PipelineContext
from reef.recipe.grouped.processor import GroupedJobData
from reef.record2sample import ReportSamples
from reef.storage import NewSample, TrainerSamples, open_database
from reef.storage.database import Database
from reef.storage.json_values import dump
from reef.storage.tables import sample_trains
from reef.testing.storage import postgres_schema_url
from reef.train.pipeline import TrainingPipeline

SCENARIO = "bench"
TRAINER = "c"
JOB_SAMPLES = 32
UNTRAINED = 200
ROUNDS = 30
GOAL = 1.5


def _body(n: int) -> dict[str, object]:
    steps = [{"step_id": 1, "source": "agent", "message": f"answer {n} " + "words " * 20}]
    return sample_body(TrajectorySample({"schema_version": "ATIF-v1.4", "steps": steps}))


def fill_trained(database: Database, n: int) -> None:
    """``n`` samples that trainer ``c`` already trained, in bulk (setting up, not measured)."""
    insert_samples(
        database,
        n,
        scenario=SCENARIO,
        trainer=TRAINER,
        id_prefix="trained",
        body=dump(_body(0)),
        commit_tx=1,
        beside=sample_trains,
        beside_row=lambda seq: {"sample_seq": seq, "trainer": TRAINER, "count": 1},
    )


def pipeline(database: Database) -> TrainingPipeline:
    context = PipelineContext(SCENARIO, TRAINER)
    return TrainingPipeline(
        ReportSamples(context),
        GroupedJobData(context, job_samples=JOB_SAMPLES, buffer_size=JOB_SAMPLES),
        samples=TrainerSamples(database, SCENARIO),
        context=context,
    )


def step_seconds(pipelines: list[TrainingPipeline]) -> list[float]:
    """Per pipeline, the median over ROUNDS of ready + build_job_data + release (alternating)."""
    times: list[list[float]] = [[] for _ in pipelines]
    for _ in range(ROUNDS):
        for p, t in zip(pipelines, times, strict=True):
            started = time.perf_counter()
            assert p.ready(JOB_SAMPLES)
            data = p.build_job_data(JOB_SAMPLES)
            assert data is not None
            t.append(time.perf_counter() - started)
            p.release_job_data(data.id)
    return [statistics.median(t) for t in times]


def report(baseline: tuple[str, float], measured: tuple[str, float]) -> int:
    """Print the step's median beside the baseline's (each named) and their ratio against the
    goal; returns the exit status (0 when the goal is met)."""
    ratio = measured[1] / baseline[1]
    for name, seconds in (baseline, measured):
        print(f"ready + build_job_data, {name}: {seconds * 1e3:7.3f} ms")
    print(f"ratio {ratio:.2f} (goal <= {GOAL}): {'ok' if ratio <= GOAL else 'MISSED'}")
    return 0 if ratio <= GOAL else 1


@contextlib.contextmanager
def urls(base: str | None) -> Iterator[list[str]]:
    if base is None:
        with tempfile.TemporaryDirectory() as folder:
            yield [f"sqlite:///{folder}/small.db", f"sqlite:///{folder}/large.db"]
        return
    with postgres_schema_url(base) as small, postgres_schema_url(base) as large:
        yield [small, large]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="a PostgreSQL URL (default: SQLite files)")
    parser.add_argument("--trained", type=int, default=1_000_000)
    args = parser.parse_args()
    with urls(args.database_url) as (small_url, large_url):
        databases = []
        for url, trained in ((small_url, 1_000), (large_url, args.trained)):
            database = open_database(url)
            TrainerSamples(database, SCENARIO).register_trainer(TRAINER, reads_uploads=False)
            started = time.perf_counter()
            fill_trained(database, trained)
            store = TrainerSamples(database, SCENARIO)
            for n in range(UNTRAINED):
                store.add_samples(TRAINER, [NewSample(f"new-{n}", "trajectory", _body(n))])
            print(f"filled {trained:>9,} trained samples in {time.perf_counter() - started:.1f} s")
            databases.append((trained, database))
        small, large = step_seconds([pipeline(d) for _, d in databases])
        for _, database in databases:
            database.dispose()
    return report(
        (f"{databases[0][0]:>9,} trained", small), (f"{databases[1][0]:>9,} trained", large)
    )


if __name__ == "__main__":
    sys.exit(main())
