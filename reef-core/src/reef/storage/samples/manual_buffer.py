"""Each trainer's manual buffer: the samples a client chose for the next instruction (P-MODE-5).

A sample leaves it when it trains (:func:`forget_chosen`, in the commit's transaction) or when
an upload leaves the scenario.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, delete, select

from reef.storage.errors import UnknownSampleError
from reef.storage.samples.sample_rows import SampleRows, StoredSample, stored_sample
from reef.storage.tables import manual_buffer, samples
from reef.storage.upserts import insert_or_ignore

__all__ = ["ManualBuffers", "forget_chosen"]


def forget_chosen(
    connection: Connection, seqs: Sequence[int], *, scenario: str, trainer: str | None = None
) -> None:
    """Take the samples of store sequences ``seqs`` out of ``trainer``'s manual buffer (every
    trainer's with ``None``), in the caller's transaction."""
    if not seqs:
        return
    query = delete(manual_buffer).where(
        manual_buffer.c.scenario == scenario, manual_buffer.c.sample_seq.in_(list(seqs))
    )
    if trainer is not None:
        query = query.where(manual_buffer.c.trainer == trainer)
    connection.execute(query)


class ManualBuffers(SampleRows):
    """The manual buffers of one scenario's trainers."""

    def manual_buffer(self, trainer: str) -> list[StoredSample]:
        """``trainer``'s manual buffer: the samples a client chose, in store order (P-MODE-5)."""
        query = (
            select(samples)
            .join(manual_buffer, manual_buffer.c.sample_seq == samples.c.seq)
            .where(manual_buffer.c.scenario == self.scenario, manual_buffer.c.trainer == trainer)
            .order_by(samples.c.commit_tx, samples.c.seq)
        )
        with self._database.read() as connection:
            return [stored_sample(row) for row in connection.execute(query)]

    def insert_into_manual_buffer(self, trainer: str, sample_ids: Sequence[str]) -> None:
        """Add samples to ``trainer``'s manual buffer (those already in it stay once).

        :raises UnknownSampleError: when a sample is not stored (or was a removed upload).
        """
        with self._database.write() as connection:
            query = select(samples.c.id, samples.c.seq).where(
                samples.c.scenario == self.scenario,
                samples.c.id.in_(list(sample_ids)),
                samples.c.removed.is_(False),
            )
            seqs = dict(connection.execute(query).all())
            missing = tuple(i for i in sample_ids if i not in seqs)
            if missing:
                raise UnknownSampleError(self.scenario, missing)
            rows = [
                {"scenario": self.scenario, "trainer": trainer, "sample_seq": seq}
                for seq in seqs.values()
            ]
            insert_or_ignore(connection, manual_buffer, rows)

    def remove_from_manual_buffer(self, trainer: str, sample_ids: Sequence[str]) -> None:
        """Take samples out of ``trainer``'s manual buffer (absent ones are ignored)."""
        chosen = select(samples.c.seq).where(
            samples.c.scenario == self.scenario, samples.c.id.in_(list(sample_ids))
        )
        with self._database.write() as connection:
            connection.execute(
                delete(manual_buffer).where(
                    manual_buffer.c.scenario == self.scenario,
                    manual_buffer.c.trainer == trainer,
                    manual_buffer.c.sample_seq.in_(chosen),
                )
            )
