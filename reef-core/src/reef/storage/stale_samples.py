"""Which untrained samples each trainer leaves out of its buffer as stale, as of its last step.

Staleness is the trainer's judgment (its record-to-sample stage compares a sample's artifact
with the artifacts it saw served), held in its memory. The trainer writes the set here when it
changes, so that another process (the service, the console) can show and filter it: the whole
set when a tenure starts (:meth:`StaleSamples.replace`), then only what changed
(:meth:`StaleSamples.change`). A sample that trains leaves the set at the next step.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sqlalchemy import Column, PrimaryKeyConstraint, String, Table, delete, select

from reef.storage.database import Database
from reef.storage.tables import metadata
from reef.storage.upserts import insert_or_ignore

__all__ = ["StaleSamples", "stale_samples"]

stale_samples = Table(
    "reef_stale_samples",
    metadata,
    Column("scenario", String(400), nullable=False),
    Column("trainer", String(400), nullable=False),
    Column("sample_id", String(400), nullable=False),
    PrimaryKeyConstraint("scenario", "trainer", "sample_id"),
    comment="The untrained samples each trainer leaves out as stale, as of its last step.",
)


class StaleSamples:
    """The stale marks of one scenario's trainers."""

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario

    def replace(self, trainer: str, sample_ids: Iterable[str]) -> None:
        """Make ``sample_ids`` the whole stale set of ``trainer``."""
        with self._database.write() as connection:
            connection.execute(
                delete(stale_samples).where(
                    stale_samples.c.scenario == self.scenario, stale_samples.c.trainer == trainer
                )
            )
            insert_or_ignore(connection, stale_samples, self._rows(trainer, sample_ids))

    def change(self, trainer: str, *, added: Iterable[str], removed: Iterable[str]) -> None:
        """Add and remove marks of ``trainer``."""
        gone = sorted(set(removed))
        with self._database.write() as connection:
            if gone:
                connection.execute(
                    delete(stale_samples).where(
                        stale_samples.c.scenario == self.scenario,
                        stale_samples.c.trainer == trainer,
                        stale_samples.c.sample_id.in_(gone),
                    )
                )
            insert_or_ignore(connection, stale_samples, self._rows(trainer, added))

    def _rows(self, trainer: str, sample_ids: Iterable[str]) -> list[dict[str, str]]:
        return [
            {"scenario": self.scenario, "trainer": trainer, "sample_id": sample_id}
            for sample_id in sorted(set(sample_ids))
        ]

    def marked(self, sample_ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """The trainers that hold each of ``sample_ids`` stale (samples held by none are left
        out)."""
        if not sample_ids:
            return {}
        query = (
            select(stale_samples.c.sample_id, stale_samples.c.trainer)
            .where(
                stale_samples.c.scenario == self.scenario,
                stale_samples.c.sample_id.in_(list(dict.fromkeys(sample_ids))),
            )
            .order_by(stale_samples.c.trainer)
        )
        found: dict[str, list[str]] = {}
        with self._database.read() as connection:
            for sample_id, trainer in connection.execute(query):
                found.setdefault(sample_id, []).append(trainer)
        return {sample_id: tuple(trainers) for sample_id, trainers in found.items()}
