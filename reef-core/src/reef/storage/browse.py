"""Reading a scenario's samples the way a person browses them: in store order, a page at a
time, filtered, each with what every trainer did with it.

Read-only: it reads the sample store's tables (samples, train counts, manual buffers), the
trainers' stale marks (:mod:`reef.storage.stale_samples`) and the job history's failed jobs,
and never changes a row. The console's routes use it (``docs/console.md``).

A sample a failed job sent to its component is *consumed by a failed job*, not trained: the
job's weights were thrown away. Its train count still holds that commit (it never trains again
for that trainer, P-PIPE-10), so what the browser calls trained is the commits less the failed
jobs that sent it (:attr:`BrowsedSample.failed_counts`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from sqlalchemy import ColumnElement, Connection, and_, func, literal, select, tuple_

from reef.storage.database import Database
from reef.storage.job_history import FAILED, job_samples, jobs
from reef.storage.positions import Position
from reef.storage.samples import StoredSample, TrainerSamples
from reef.storage.stale_samples import StaleSamples, stale_samples
from reef.storage.tables import manual_buffer, sample_trains, samples

__all__ = ["BrowsedSample", "SampleBrowser", "SampleFilter"]


@attrs.frozen
class SampleFilter:
    """Which samples a page shows; every condition given must hold.

    :ivar kind: ``"trajectory"`` or ``"task"``.
    :ivar group_id: the group the samples train with.
    :ivar trained: trained by a job that did not fail (True) or by none (False).
    :ivar stale: left out of a buffer as stale (True) or not (False).
    :ivar chosen: in a manual buffer (True) or in none (False).
    :ivar trainer: the trainer ``trained``, ``stale`` and ``chosen`` ask about; any trainer
        when ``None``.
    """

    kind: str | None = None
    group_id: str | None = None
    trained: bool | None = None
    stale: bool | None = None
    trainer: str | None = None
    chosen: bool | None = None


@attrs.frozen
class BrowsedSample:
    """A stored sample and what the trainers did with it.

    :ivar train_counts: how many committed jobs of each trainer trained it, the failed ones
        left out (trainers that never did are left out).
    :ivar manual_buffers: the trainers whose manual buffer holds it.
    :ivar stale_for: the trainers that leave it out as stale.
    :ivar failed_counts: how many failed jobs of each trainer it was sent to: consumed, its
        training thrown away (trainers of none are left out).
    """

    stored: StoredSample
    train_counts: Mapping[str, int]
    manual_buffers: tuple[str, ...]
    stale_for: tuple[str, ...]
    failed_counts: Mapping[str, int] = attrs.field(factory=dict)


class SampleBrowser:
    """The samples of one scenario, for reading (see the module's documentation)."""

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario
        self._samples = TrainerSamples(database, scenario)
        self._stale = StaleSamples(database, scenario)

    def page(
        self,
        where: SampleFilter,
        *,
        after: Position | None = None,
        limit: int = 50,
        newest_first: bool = False,
    ) -> tuple[list[BrowsedSample], int]:
        """Up to ``limit`` samples that meet ``where``, after position ``after`` in the order
        asked (store order, or newest first), and how many samples meet ``where`` in all.

        Removed uploads (items detached from the scenario) are not shown.
        """
        conditions = self._conditions(where)
        order = tuple_(samples.c.commit_tx, samples.c.seq)
        query = select(samples.c.id).where(*conditions)
        if after is not None:
            cursor = tuple_(literal(after.commit_tx), literal(after.seq))
            query = query.where(order < cursor if newest_first else order > cursor)
        query = query.order_by(
            *(
                (samples.c.commit_tx.desc(), samples.c.seq.desc())
                if newest_first
                else (samples.c.commit_tx, samples.c.seq)
            )
        ).limit(limit)
        with self._database.read() as connection:
            ids = list(connection.execute(query).scalars())
            total = int(
                connection.execute(
                    select(func.count()).select_from(samples).where(*conditions)
                ).scalar_one()
            )
        found = self._browsed(self._samples.get(ids))
        return sorted(found, key=lambda s: s.stored.position, reverse=newest_first), total

    def one(self, sample_id: str) -> BrowsedSample | None:
        """The sample ``sample_id`` (``None`` when not stored, or a removed upload)."""
        found = self._browsed(self._samples.get([sample_id]))
        return found[0] if found else None

    def _conditions(self, where: SampleFilter) -> list[ColumnElement[bool]]:
        conditions: list[ColumnElement[bool]] = [
            samples.c.scenario == self.scenario,
            samples.c.removed.is_(False),
        ]
        if where.kind is not None:
            conditions.append(samples.c.kind == where.kind)
        if where.group_id is not None:
            conditions.append(samples.c.group_id == where.group_id)
        # Each mark (trained, stale, chosen): a row of its table for the sample, of the
        # trainer asked about or of any; the filter wants one (True) or none (False). Trained
        # is a train count beyond the failed jobs of that trainer that sent the sample.
        marks = (
            (where.trained, sample_trains.c.trainer,
             (sample_trains.c.sample_seq == samples.c.seq,
              sample_trains.c["count"] > self._failed_sends(sample_trains.c.trainer))),
            (where.stale, stale_samples.c.trainer,
             (stale_samples.c.scenario == self.scenario,
              stale_samples.c.sample_id == samples.c.id)),
            (where.chosen, manual_buffer.c.trainer,
             (manual_buffer.c.scenario == self.scenario,
              manual_buffer.c.sample_seq == samples.c.seq)),
        )  # fmt: skip
        for wanted, trainer, of_sample in marks:
            if wanted is None:
                continue
            found = select(literal(1)).where(*of_sample)
            if where.trainer is not None:
                found = found.where(trainer == where.trainer)
            conditions.append(found.exists() if wanted else ~found.exists())
        return conditions

    def _failed_sends(self, trainer: Any) -> Any:  # a correlated SQL count
        """How many failed jobs of ``trainer`` (a column) sent the sample of the outer query."""
        return (
            select(func.count())
            .select_from(job_samples)
            .join(jobs, self._same_job())
            .where(
                job_samples.c.scenario == self.scenario,
                job_samples.c.sample_id == samples.c.id,
                job_samples.c.trainer == trainer,
                job_samples.c.trained.is_(True),
                jobs.c.event == FAILED,
            )
            .correlate(samples, trainer.table)
            .scalar_subquery()
        )

    @staticmethod
    def _same_job() -> ColumnElement[bool]:
        return and_(
            jobs.c.scenario == job_samples.c.scenario,
            jobs.c.trainer == job_samples.c.trainer,
            jobs.c.job_id == job_samples.c.job_id,
        )

    def _failed_counts(
        self, connection: Connection, ids: Sequence[str]
    ) -> dict[str, dict[str, int]]:
        """Sample id -> trainer -> how many failed jobs of that trainer sent it."""
        query = (
            select(job_samples.c.sample_id, job_samples.c.trainer, func.count())
            .select_from(job_samples)
            .join(jobs, self._same_job())
            .where(
                job_samples.c.scenario == self.scenario,
                job_samples.c.sample_id.in_(list(ids)),
                job_samples.c.trained.is_(True),
                jobs.c.event == FAILED,
            )
            .group_by(job_samples.c.sample_id, job_samples.c.trainer)
        )
        found: dict[str, dict[str, int]] = {}
        for sample_id, trainer, count in connection.execute(query):
            found.setdefault(str(sample_id), {})[str(trainer)] = int(count)
        return found

    def _browsed(self, stored: Sequence[StoredSample]) -> list[BrowsedSample]:
        if not stored:
            return []
        seqs = [s.position.seq for s in stored]
        with self._database.read() as connection:
            counts = self._by_seq(
                connection,
                select(
                    sample_trains.c.sample_seq, sample_trains.c.trainer, sample_trains.c["count"]
                )
                .where(sample_trains.c.sample_seq.in_(seqs), sample_trains.c["count"] > 0)
                .order_by(sample_trains.c.trainer),
            )
            buffers = self._by_seq(
                connection,
                select(manual_buffer.c.sample_seq, manual_buffer.c.trainer, literal(1))
                .where(
                    manual_buffer.c.scenario == self.scenario, manual_buffer.c.sample_seq.in_(seqs)
                )
                .order_by(manual_buffer.c.trainer),
            )
            failed = self._failed_counts(connection, [s.id for s in stored])
        stale = self._stale.marked([s.id for s in stored])
        return [
            BrowsedSample(
                s,
                _trained(counts.get(s.position.seq, {}), failed.get(s.id, {})),
                tuple(buffers.get(s.position.seq, {})),
                stale.get(s.id, ()),
                failed.get(s.id, {}),
            )
            for s in stored
        ]

    @staticmethod
    def _by_seq(connection: Connection, query: Any) -> dict[int, dict[str, int]]:
        found: dict[int, dict[str, int]] = {}
        for seq, trainer, value in connection.execute(query):
            found.setdefault(int(seq), {})[str(trainer)] = int(value)
        return found


def _trained(commits: Mapping[str, int], failed: Mapping[str, int]) -> dict[str, int]:
    """Each trainer's commits of a sample less the failed jobs that sent it, where any is left."""
    left = {trainer: n - failed.get(trainer, 0) for trainer, n in commits.items()}
    return {trainer: n for trainer, n in left.items() if n > 0}
