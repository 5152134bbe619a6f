"""Each trainer's jobs as they happened, kept for people to read: when each job was submitted and
how it ended, its metrics, and every sample it consumed with the reward that sample trained with.

The trainer writes it through its fenced database (so a trainer that lost its lease writes
nothing): a job's row and its samples before the job reaches the component
(:meth:`JobHistory.submitted`), its end once the end is committed (:meth:`JobHistory.ended`).
A submission that never reached the component (the component refused it, or the process died
first) ends as ``released`` (:meth:`JobHistory.released`, :meth:`JobHistory.release_unfinished`):
its samples went back to the buffer and trained in no job of this row.

Nothing reads it to decide what trains: the consumption and train counts live in the sample
store. It answers the console's questions (the history of losses and rewards, which job trained
a sample and with which reward, and what an extension such as Agent ECC decided about it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Connection,
    Float,
    Index,
    Integer,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
    select,
    update,
)

from reef.storage import json_values
from reef.storage.database import Database
from reef.storage.tables import metadata
from reef.storage.upserts import insert_or_ignore

__all__ = [
    "FAILED",
    "RELEASED",
    "JobEntry",
    "JobHistory",
    "JobSampleEntry",
    "SampleOfJob",
    "scalar_metrics",
]

JSON = dict[str, Any]

#: The event of a job whose data went back to the buffer before the component trained it.
RELEASED: Final = "released"
#: The event of a job its component failed: the samples it sent were consumed, not trained.
FAILED: Final = "failed"

jobs = Table(
    "reef_jobs",
    metadata,
    Column("seq", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True),
    Column("scenario", String(400), nullable=False),
    Column("trainer", String(400), nullable=False),
    Column("job_id", String(400), nullable=False),
    Column("submitted_at", Float, nullable=True),
    Column("instruction_id", String(400), nullable=True),
    Column("ended_at", Float, nullable=True),
    # finished, failed or released; NULL while the job runs.
    Column("event", String(16), nullable=True),
    Column("metrics", Text, nullable=False),
    Column("error", Text, nullable=True),
    # What each extension said of the job as a whole (JSON, by extension name).
    Column("extensions", Text, nullable=False),
    # Counted once at submission: samples sent to the component, samples consumed (sent or
    # retired), the mean reward of those sent that have one.
    Column("trained", Integer, nullable=False),
    Column("consumed", Integer, nullable=False),
    Column("reward_mean", Float, nullable=True),
    # The artifact a finished job's weights were published as (NULL until then, and for a
    # job that did not finish).
    Column("artifact_id", String(400), nullable=True),
    UniqueConstraint("scenario", "trainer", "job_id"),
    Index(None, "scenario", "seq"),
    sqlite_autoincrement=True,
    comment="Each trainer's jobs, for people to read: submission, end, metrics.",
)

job_samples = Table(
    "reef_job_samples",
    metadata,
    Column("scenario", String(400), nullable=False),
    Column("trainer", String(400), nullable=False),
    Column("job_id", String(400), nullable=False),
    Column("sample_id", String(400), nullable=False),
    # False: consumed by the job without training (an extension retired it before submission).
    Column("trained", Boolean, nullable=False),
    Column("reward", Float, nullable=True),
    # What each extension said of this sample in this job (JSON, by extension name).
    Column("extensions", Text, nullable=False),
    PrimaryKeyConstraint("scenario", "trainer", "job_id", "sample_id"),
    Index(None, "scenario", "sample_id"),
    comment="The samples each job consumed, with the reward each trained with.",
)


def scalar_metrics(metrics: Mapping[str, Any]) -> JSON:
    """The metrics a history keeps: numbers, strings, booleans and nulls.

    Lists and objects (a component's per-sample reports) are left out; a number that is not
    finite is kept as its name (``"nan"``, ``"inf"``), since JSON has no such number.
    """
    kept: JSON = {}
    for name, value in metrics.items():
        if isinstance(value, float) and not math.isfinite(value):
            kept[str(name)] = str(value)
        elif value is None or isinstance(value, str | int | float | bool):
            kept[str(name)] = value
    return kept


@attrs.frozen
class SampleOfJob:
    """A sample a job consumed, as the trainer submits it.

    :ivar sample_id: the sample's id.
    :ivar trained: whether it went to the component (False: consumed without training).
    :ivar reward: the reward it trained with; ``None`` when it has none (a task, SFT).
    :ivar extensions: what each extension said of it, by extension name (JSON).
    """

    sample_id: str
    trained: bool
    reward: float | None = None
    extensions: JSON = attrs.field(factory=dict)


@attrs.frozen
class JobEntry:
    """One job of the history.

    :ivar seq: its place in the history (submission order across the scenario's trainers).
    :ivar event: ``finished``, ``failed``, ``released``; ``None`` while it runs.
    :ivar trained: how many samples went to the component.
    :ivar consumed: how many samples the job consumed (trained or retired).
    :ivar reward_mean: the mean reward of the trained samples that have one.
    :ivar number: its number in the scenario's history, 1 for the first job submitted (0 where
        it was not read numbered).
    :ivar artifact_id: the artifact its weights were published as, once they were.
    """

    seq: int
    trainer: str
    job_id: str
    submitted_at: float | None
    instruction_id: str | None
    ended_at: float | None
    event: str | None
    metrics: JSON
    error: str | None
    extensions: JSON
    trained: int
    consumed: int
    reward_mean: float | None
    number: int = 0
    artifact_id: str | None = None


@attrs.frozen
class JobSampleEntry:
    """A sample's part in one job: the job and what the sample was in it."""

    job: JobEntry
    sample: SampleOfJob


class JobHistory:
    """The job history of one scenario (see the module's documentation)."""

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario

    # -- written by the trainer ------------------------------------------------------------

    def submitted(
        self,
        trainer: str,
        job_id: str,
        samples: Sequence[SampleOfJob],
        *,
        instruction_id: str | None = None,
        extensions: Mapping[str, Any] | None = None,
    ) -> None:
        """Note a job about to be submitted, with its samples (idempotent per job id)."""
        rewarded = [s for s in samples if s.trained]
        rewards = [s.reward for s in rewarded if s.reward is not None]
        row = {
            "scenario": self.scenario,
            "trainer": trainer,
            "job_id": job_id,
            "submitted_at": time.time(),
            "instruction_id": instruction_id,
            "metrics": "{}",
            "extensions": json_values.dump(dict(extensions or {})),
            "trained": len(rewarded),
            "consumed": len(samples),
            "reward_mean": sum(rewards) / len(rewards) if rewards else None,
        }
        sample_rows = [
            {
                "scenario": self.scenario,
                "trainer": trainer,
                "job_id": job_id,
                "sample_id": s.sample_id,
                "trained": s.trained,
                "reward": s.reward,
                "extensions": json_values.dump(s.extensions),
            }
            for s in samples
        ]
        with self._database.write() as connection:
            insert_or_ignore(connection, jobs, [row])
            insert_or_ignore(connection, job_samples, sample_rows)

    def ended(
        self,
        trainer: str,
        job_id: str,
        event: str,
        metrics: Mapping[str, Any],
        error: str | None = None,
    ) -> None:
        """Note how a job ended. A job the history does not hold (submitted before the history
        existed) gets a row of its own, without samples. The trainer notes it inside the
        transaction that ends the job (:meth:`ended_in`)."""
        with self._database.write() as connection:
            self.ended_in(connection, trainer, job_id, event, metrics, error)

    def ended_in(
        self,
        connection: Connection,
        trainer: str,
        job_id: str,
        event: str,
        metrics: Mapping[str, Any],
        error: str | None = None,
    ) -> int:
        """:meth:`ended`, inside the caller's transaction; how many samples the job sent to
        its component (0 for a job the history did not hold)."""
        values = {
            "ended_at": time.time(),
            "event": event,
            "metrics": json_values.dump(scalar_metrics(metrics)),
            "error": error,
        }
        insert_or_ignore(
            connection,
            jobs,
            [
                {
                    "scenario": self.scenario,
                    "trainer": trainer,
                    "job_id": job_id,
                    "metrics": "{}",
                    "extensions": "{}",
                    "trained": 0,
                    "consumed": 0,
                }
            ],
        )
        connection.execute(update(jobs).where(*self._job(trainer, job_id)).values(**values))
        sent = connection.execute(select(jobs.c.trained).where(*self._job(trainer, job_id)))
        return int(sent.scalar_one())

    def published(self, trainer: str, job_id: str, artifact_id: str) -> None:
        """Note the artifact a finished job's weights were published as."""
        with self._database.write() as connection:
            connection.execute(
                update(jobs).where(*self._job(trainer, job_id)).values(artifact_id=artifact_id)
            )

    def released(self, trainer: str, job_id: str, reason: str) -> None:
        """Note that a job's data went back to the buffer before the component trained it."""
        with self._database.write() as connection:
            connection.execute(
                update(jobs)
                .where(*self._job(trainer, job_id), jobs.c.event.is_(None))
                .values(ended_at=time.time(), event=RELEASED, error=reason)
            )

    def release_unfinished(self, trainer: str, *, running: str | None) -> None:
        """At a trainer's start: every job of ``trainer`` without an end, but ``running`` (the
        job it found in flight), never reached its component."""
        condition = [
            jobs.c.scenario == self.scenario,
            jobs.c.trainer == trainer,
            jobs.c.event.is_(None),
        ]
        if running is not None:
            condition.append(jobs.c.job_id != running)
        with self._database.write() as connection:
            connection.execute(
                update(jobs)
                .where(*condition)
                .values(
                    ended_at=time.time(),
                    event=RELEASED,
                    error="the trainer stopped before the job reached its component",
                )
            )

    def _job(self, trainer: str, job_id: str) -> list[Any]:
        return [
            jobs.c.scenario == self.scenario,
            jobs.c.trainer == trainer,
            jobs.c.job_id == job_id,
        ]

    # -- read by the console ---------------------------------------------------------------

    def read(
        self, *, trainer: str | None = None, before: int | None = None, limit: int | None = 100
    ) -> list[JobEntry]:
        """The latest ``limit`` jobs (of ``trainer``, else of every trainer; every job when
        ``None``) submitted before history place ``before``, oldest first, each numbered in
        the scenario's history."""
        query = select(jobs, self._number()).where(jobs.c.scenario == self.scenario)
        if trainer is not None:
            query = query.where(jobs.c.trainer == trainer)
        if before is not None:
            query = query.where(jobs.c.seq < before)
        query = query.order_by(jobs.c.seq.desc())
        if limit is not None:
            query = query.limit(limit)
        with self._database.read() as connection:
            rows = list(connection.execute(query))
        return [_entry(row) for row in reversed(rows)]

    def job(self, trainer: str, job_id: str) -> tuple[JobEntry, list[SampleOfJob]] | None:
        """One job of ``trainer``, numbered in the history, and the samples it consumed by
        sample id; ``None`` when the history does not hold it."""
        query = select(jobs, self._number()).where(*self._job(trainer, job_id))
        with self._database.read() as connection:
            row = connection.execute(query).first()
            if row is None:
                return None
            samples = list(
                connection.execute(
                    select(job_samples)
                    .where(
                        job_samples.c.scenario == self.scenario,
                        job_samples.c.trainer == trainer,
                        job_samples.c.job_id == job_id,
                    )
                    .order_by(job_samples.c.sample_id)
                )
            )
        return _entry(row), [
            SampleOfJob(s.sample_id, bool(s.trained), s.reward, json_values.load(s.extensions))
            for s in samples
        ]

    @staticmethod
    def _number() -> Any:  # a labelled scalar subquery
        """A job's ``number`` in its scenario's history: the jobs submitted up to it, counted
        on the ``(scenario, seq)`` index (a range of it per row, never a walk of the table)."""
        earlier = jobs.alias("earlier")
        return (
            select(func.count())
            .select_from(earlier)
            .where(earlier.c.scenario == jobs.c.scenario, earlier.c.seq <= jobs.c.seq)
            .correlate(jobs)
            .scalar_subquery()
            .label("number")
        )

    def of_sample(self, sample_id: str) -> list[JobSampleEntry]:
        """Every job that consumed ``sample_id``, in history order and numbered, with the
        sample's part."""
        query = (
            select(
                jobs,
                self._number(),
                job_samples.c.trained.label("sample_trained"),
                job_samples.c.reward.label("sample_reward"),
                job_samples.c.extensions.label("sample_extensions"),
            )
            .join(
                job_samples,
                (job_samples.c.scenario == jobs.c.scenario)
                & (job_samples.c.trainer == jobs.c.trainer)
                & (job_samples.c.job_id == jobs.c.job_id),
            )
            .where(job_samples.c.scenario == self.scenario, job_samples.c.sample_id == sample_id)
            .order_by(jobs.c.seq)
        )
        with self._database.read() as connection:
            rows = list(connection.execute(query))
        return [
            JobSampleEntry(
                _entry(row),
                SampleOfJob(
                    sample_id,
                    bool(row.sample_trained),
                    row.sample_reward,
                    json_values.load(row.sample_extensions),
                ),
            )
            for row in rows
        ]


def _entry(row: Any) -> JobEntry:
    return JobEntry(
        seq=int(row.seq),
        trainer=row.trainer,
        job_id=row.job_id,
        submitted_at=row.submitted_at,
        instruction_id=row.instruction_id,
        ended_at=row.ended_at,
        event=row.event,
        metrics=json_values.load(row.metrics),
        error=row.error,
        extensions=json_values.load(row.extensions),
        trained=row.trained,
        consumed=row.consumed,
        reward_mean=row.reward_mean,
        number=int(getattr(row, "number", 0) or 0),
        artifact_id=row.artifact_id,
    )
