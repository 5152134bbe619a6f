"""Each trainer's consumption: the records it consumed, the jobs it committed, its train counts.

A commit (:meth:`Consumption.commit_submission`) is one transaction: train counts, the samples
leaving the trainer's untrained ones and manual buffer, the instruction, the released records
and their drop counts. Recovery asks which records a trainer consumed, one indexed query per
batch.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence

from sqlalchemy import Column, and_, delete, select, tuple_

from reef.storage.drops import add_drops
from reef.storage.errors import UnknownSampleError
from reef.storage.samples.instructions import consume_instruction
from reef.storage.samples.manual_buffer import forget_chosen
from reef.storage.samples.sample_rows import SampleRows
from reef.storage.tables import (
    consumed_records,
    pending_samples,
    sample_trains,
    samples,
    submissions,
)
from reef.storage.upserts import add_counts, insert_or_ignore

__all__ = ["Consumption"]


class Consumption(SampleRows):
    """What each trainer of one scenario consumed and committed."""

    def consumed_record_ids(self, trainer: str) -> frozenset[str]:
        """The ids of the records ``trainer`` consumed: recovery skips them (P-SET-20)."""
        query = select(consumed_records.c.record_id).where(
            consumed_records.c.scenario == self.scenario, consumed_records.c.trainer == trainer
        )
        with self._database.read() as connection:
            return frozenset(connection.execute(query).scalars())

    def consumed_among(self, trainer: str, record_ids: Sequence[str]) -> frozenset[str]:
        """Which of ``record_ids`` ``trainer`` consumed: recovery's membership test (P-SET-20).

        One indexed query per call, so a trainer asks per batch of pushed records instead of
        holding every consumed id of its history in memory.
        """
        return self._held_among(consumed_records.c.record_id, trainer, record_ids)

    def submitted_among(self, trainer: str, data_ids: Sequence[str]) -> frozenset[str]:
        """Which of ``data_ids`` ``trainer`` committed: the pipeline names new job data with an
        id no commit used (a commit is idempotent per id). One query by primary key."""
        return self._held_among(submissions.c.data_id, trainer, data_ids)

    def _held_among(self, column: Column[str], trainer: str, ids: Sequence[str]) -> frozenset[str]:
        # Which of ``ids`` ``column`` holds for ``trainer``, in a table keyed by scenario,
        # trainer and ``column``: one query by primary key.
        if not ids:
            return frozenset()
        table = column.table
        query = select(column).where(
            table.c.scenario == self.scenario,
            table.c.trainer == trainer,
            column.in_(list(dict.fromkeys(ids))),
        )
        with self._database.read() as connection:
            return frozenset(connection.execute(query).scalars())

    def train_counts(self, trainer: str, sample_ids: Sequence[str]) -> dict[str, int]:
        """How many committed jobs of ``trainer`` trained each sample (0 when none)."""
        query = (
            select(samples.c.id, sample_trains.c["count"])
            .join(
                sample_trains,
                and_(
                    sample_trains.c.sample_seq == samples.c.seq, sample_trains.c.trainer == trainer
                ),
            )
            .where(samples.c.scenario == self.scenario, samples.c.id.in_(list(sample_ids)))
        )
        with self._database.read() as connection:
            counts = dict(connection.execute(query).all())
        return {sample_id: int(counts.get(sample_id, 0)) for sample_id in sample_ids}

    def commit_submission(
        self,
        trainer: str,
        data_id: str,
        sample_ids: Sequence[str],
        instruction_id: str | None = None,
        *,
        released_record_ids: Iterable[str] = (),
        drops: Mapping[str, int] | None = None,
    ) -> bool:
        """Commit the submission of job data ``data_id``, in one transaction (P-PIPE-9).

        Adds one to ``trainer``'s train count of each listed sample, takes them out of its
        untrained samples and its manual buffer (P-MODE-7), consumes the instruction (its
        request id) and the released records (P-STALE-1), and adds ``drops`` (reason -> how
        many of the released records ended without training) to ``trainer``'s drop counts, so
        an ended record is counted exactly when its end becomes durable. Idempotent per
        ``data_id``.

        :returns: True when committed now; False when ``data_id`` was committed already.
        :raises UnknownSampleError: when a listed sample was never stored (nothing is written).
        """
        ids = list(dict.fromkeys(sample_ids))
        with self._database.write() as connection:
            done = connection.execute(
                select(submissions.c.data_id).where(
                    submissions.c.scenario == self.scenario,
                    submissions.c.trainer == trainer,
                    submissions.c.data_id == data_id,
                )
            ).first()
            if done is not None:
                return False
            found = self._positions(connection, ids)
            missing = tuple(i for i in ids if i not in found)
            if missing:
                raise UnknownSampleError(self.scenario, missing)
            connection.execute(
                submissions.insert().values(
                    scenario=self.scenario,
                    trainer=trainer,
                    data_id=data_id,
                    committed_at=time.time(),
                )
            )
            positions = list(found.values())
            seqs = [p.seq for p in positions]
            add_counts(
                connection,
                sample_trains,
                [{"sample_seq": seq, "trainer": trainer, "count": 1} for seq in seqs],
                key=("sample_seq", "trainer"),
                columns=("count",),
            )
            if positions:
                connection.execute(
                    delete(pending_samples).where(
                        pending_samples.c.scenario == self.scenario,
                        pending_samples.c.trainer == trainer,
                        tuple_(pending_samples.c.commit_tx, pending_samples.c.sample_seq).in_(
                            [(p.commit_tx, p.seq) for p in positions]
                        ),
                    )
                )
                forget_chosen(connection, seqs, scenario=self.scenario, trainer=trainer)
            if instruction_id is not None:
                consume_instruction(connection, self.scenario, trainer, instruction_id)
            insert_or_ignore(
                connection,
                consumed_records,
                [
                    {"scenario": self.scenario, "trainer": trainer, "record_id": record_id}
                    for record_id in sorted(set(released_record_ids))
                ],
            )
            if drops:
                add_drops(connection, self.scenario, drops, trainer=trainer)
        return True
