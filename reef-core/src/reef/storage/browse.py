"""Reading a scenario's samples the way a person browses them: in store order, a page at a
time, filtered, each with what every trainer did with it.

Read-only: it reads the sample store's tables (samples, train counts, manual buffers) and the
trainers' stale marks (:mod:`reef.storage.stale_samples`), and never changes a row. The
console's routes use it (``docs/console.md``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs
from sqlalchemy import ColumnElement, Connection, func, literal, select, tuple_

from reef.storage.database import Database
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
    :ivar trained: trained by a job (True) or by none (False).
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

    :ivar train_counts: how many committed jobs of each trainer trained it (trainers that never
        did are left out).
    :ivar manual_buffers: the trainers whose manual buffer holds it.
    :ivar stale_for: the trainers that leave it out as stale.
    """

    stored: StoredSample
    train_counts: Mapping[str, int]
    manual_buffers: tuple[str, ...]
    stale_for: tuple[str, ...]


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
        # trainer asked about or of any; the filter wants one (True) or none (False).
        marks = (
            (where.trained, sample_trains.c.trainer,
             (sample_trains.c.sample_seq == samples.c.seq, sample_trains.c["count"] > 0)),
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
        stale = self._stale.marked([s.id for s in stored])
        return [
            BrowsedSample(
                s,
                counts.get(s.position.seq, {}),
                tuple(buffers.get(s.position.seq, {})),
                stale.get(s.id, ()),
            )
            for s in stored
        ]

    @staticmethod
    def _by_seq(connection: Connection, query: Any) -> dict[int, dict[str, int]]:
        found: dict[int, dict[str, int]] = {}
        for seq, trainer, value in connection.execute(query):
            found.setdefault(int(seq), {})[str(trainer)] = int(value)
        return found
