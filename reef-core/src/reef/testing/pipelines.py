"""A recipe's stages run as the trainer runs them, on a real sample store, in a test.

- :func:`pipeline_context`: the context a stage is built with. Unlike ``PipelineContext``'s own
  default (no runtime, so no staleness check, P-STALE-10), it checks staleness, as a deployment
  whose component loads published weights does: a test sees a stale sample as production would.
  Pass ``has_runtime_loader=False`` for a test about a scenario without one.
- :func:`training_pipeline`: the ``TrainingPipeline`` of two stages over the sample store of
  their scenario, as the trainer builds it; push records, read ``buffer()``, build, acknowledge.
- :func:`sample_store`: that store, to read what a test asks of it (train counts, untrained
  samples) beside the pipeline.
- :func:`add_upload`: store an uploaded ATIF trajectory as the service stores an attached data
  item, without knowing how the store keeps it.

With the ``storage_database`` fixture (:mod:`reef.testing.storage`) each runs on SQLite and,
when configured, PostgreSQL::

    context = pipeline_context("support", "local")
    samples = MySamples.from_config({"max_staleness": 0}, context=context, environ={})
    jobs = MyJobData.from_config(
        {"job_samples": 2}, context=context, record2sample=samples, environ={}
    )
    pipeline = training_pipeline(samples, jobs, storage_database)
"""

from __future__ import annotations

from collections.abc import Sequence

from reef.core.job_data import TrajectorySample, sample_body
from reef.core.records import JSON
from reef.core.task_stores import TaskStores
from reef.pipeline_context import PipelineContext, TrainingMode
from reef.record2sample.stage import Record2Sample
from reef.sample2job.stage import Sample2Job
from reef.storage import Database, NewSample, TrainerSamples
from reef.train.pipeline import TrainingPipeline

__all__ = [
    "add_upload",
    "pipeline_context",
    "sample_store",
    "training_pipeline",
]


def pipeline_context(
    scenario: str = "s",
    component: str = "c",
    *,
    trainers: Sequence[str] = (),
    training_mode: TrainingMode = "auto",
    task_storage: TaskStores | None = None,
    admitted_report_types: frozenset[str] = frozenset(),
    has_runtime_loader: bool = True,
) -> PipelineContext:
    """A :class:`~reef.PipelineContext` for a test: scenario ``scenario``, trainer
    ``component``, staleness checked (``has_runtime_loader=True``) unless told otherwise."""
    return PipelineContext(
        scenario,
        component,
        tuple(trainers),
        training_mode,
        task_storage=task_storage,
        admitted_report_types=admitted_report_types,
        has_runtime_loader=has_runtime_loader,
    )


def sample_store(database: Database, scenario: str) -> TrainerSamples:
    """The sample store of ``scenario`` in ``database``: what every trainer of it reads."""
    return TrainerSamples(database, scenario)


def training_pipeline(
    record2sample: Record2Sample, sample2job: Sample2Job, database: Database
) -> TrainingPipeline:
    """The pipeline of the two stages (built with the same context) over their scenario's
    sample store in ``database``; a new pipeline on the same database is a restart."""
    context = record2sample.context
    return TrainingPipeline(
        record2sample,
        sample2job,
        samples=sample_store(database, context.scenario),
        context=context,
    )


def add_upload(database: Database, scenario: str, item_id: str, trajectory: JSON) -> bool:
    """Store the ATIF ``trajectory`` (its JSON object) as the upload ``item_id`` of
    ``scenario``, as attaching a data item does: every trainer that reads uploads gets it as
    untrained, and the pipeline checks it with its stage's ``uploaded_sample`` when it reads it.

    :returns: True when stored now (False: the same upload was stored already).
    """
    upload = NewSample(item_id, "trajectory", sample_body(TrajectorySample(trajectory)))
    return sample_store(database, scenario).add_upload(upload)
