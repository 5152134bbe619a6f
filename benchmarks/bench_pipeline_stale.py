"""ready() and build_job_data(): does their cost grow with the stale samples left untrained?

Stale samples never train and stay in the store, untrained. One store holds 100,000 of them
(bulk Core inserts of untrained rows made from records, whose artifact is no longer served;
not measured) beside the same fresh samples as an empty store. A pipeline on each reads its
samples once (judging each), then a trainer's step is measured on both: ready(job_samples),
build_job_data(job_samples) and release. Goal: the stale store's step within 1.5x of the empty
one's.

    .venv/bin/python benchmarks/bench_pipeline_stale.py [--database-url URL] [--stale N]

Without --database-url it runs on SQLite files in a temporary folder. With a PostgreSQL URL each
store gets its own schema, dropped afterwards.
"""

from __future__ import annotations

import argparse
import sys
import time

from bench_pipeline_buffer import JOB_SAMPLES, SCENARIO, TRAINER, report, step_seconds, urls
from bulk_samples import insert_samples

from reef.core.job_data import TrajectorySample, sample_body
from reef.pipeline_context import PipelineContext
from reef.recipe.grouped.processor import GroupedJobData
from reef.record2sample import ReportSamples
from reef.storage import NewSample, TrainerSamples, open_database
from reef.storage.database import Database
from reef.storage.json_values import dump
from reef.storage.tables import pending_samples
from reef.train.pipeline import TrainingPipeline

FRESH = 200
SERVED = "art-new"


def _body(n: int, artifact: str) -> dict[str, object]:
    steps = [{"step_id": 1, "source": "agent", "message": f"answer {n} " + "words " * 20}]
    extra = {"reef": {"records": [{"record_id": f"r{n}", "artifact_id": artifact}]}}
    trajectory = {"schema_version": "ATIF-v1.4", "steps": steps, "extra": extra}
    return sample_body(TrajectorySample(trajectory))


def fill_stale(database: Database, n: int) -> None:
    """``n`` untrained samples made from records by an artifact no longer served, in bulk."""
    insert_samples(
        database,
        n,
        scenario=SCENARIO,
        trainer=TRAINER,
        id_prefix="stale",
        body=dump(_body(0, "art-old")),
        commit_tx=0,
        beside=pending_samples,
        beside_row=lambda seq: {
            "scenario": SCENARIO,
            "trainer": TRAINER,
            "commit_tx": 0,
            "sample_seq": seq,
        },
    )


def pipeline(database: Database) -> TrainingPipeline:
    """A pipeline that checks staleness (its component loads published weights), serving the
    new artifact, with every stored sample read."""
    context = PipelineContext(SCENARIO, TRAINER, has_runtime_loader=True)
    built = TrainingPipeline(
        ReportSamples(context, max_staleness=0),
        GroupedJobData(context, job_samples=JOB_SAMPLES, buffer_size=JOB_SAMPLES),
        samples=TrainerSamples(database, SCENARIO),
        context=context,
    )
    built.observe_serving_artifact_id(SERVED)
    built.advance()
    return built


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", help="a PostgreSQL URL (default: SQLite files)")
    parser.add_argument("--stale", type=int, default=100_000)
    args = parser.parse_args()
    with urls(args.database_url) as (empty_url, stale_url):
        pipelines = []
        for url, stale in ((empty_url, 0), (stale_url, args.stale)):
            database = open_database(url)
            store = TrainerSamples(database, SCENARIO)
            store.register_trainer(TRAINER, reads_uploads=False)
            started = time.perf_counter()
            fill_stale(database, stale)
            fresh = [NewSample(f"new-{n}", "trajectory", _body(n, SERVED)) for n in range(FRESH)]
            for sample in fresh:
                store.add_record_samples(TRAINER, [sample], [f"record-{sample.id}"])
            built = pipeline(database)
            assert built.status()["stale_samples"] == stale
            elapsed = time.perf_counter() - started
            print(f"{stale:>7,} stale samples stored and read in {elapsed:.1f} s")
            pipelines.append((built, database))
        empty, with_stale = step_seconds([p for p, _ in pipelines])
        for _, database in pipelines:
            database.dispose()
    return report((f"{0:>7,} stale", empty), (f"{args.stale:>7,} stale", with_stale))


if __name__ == "__main__":
    sys.exit(main())
