"""Durable counts of what will never train, by scenario, trainer and reason.

Silence is never an outcome: every record, report, upload or sample that will not train
(stale, aborted, skipped, a discarded group, refused at read time, an evicted body, consumed by
a job that failed) adds to a count here, in the same transaction as the change that decided it
where there is one, and ``GET /reef/status`` shows the counts.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import Connection, select

from reef.storage.database import Database
from reef.storage.tables import drop_counts
from reef.storage.upserts import add_counts

__all__ = ["DropCounters", "add_drops"]

#: Reasons that Reef itself counts; stages may count others under their own names.
STALE = "stale"
ABORTED = "aborted"
SKIPPED = "skipped"
DISCARDED = "discarded"
REFUSED = "refused"
EVICTED = "evicted"
#: Samples a failed job consumed: their training was thrown away with the job, and they never
#: train again for that trainer (P-PIPE-10).
FAILED_JOB = "failed_job"


def add_drops(
    connection: Connection, scenario: str, counts: Mapping[str, int], *, trainer: str | None
) -> None:
    """Add ``counts`` (reason → how many) inside the caller's transaction.

    :param trainer: the trainer the counts belong to; ``None`` for the scenario as a whole.
    """
    rows = [
        {"scenario": scenario, "trainer": trainer or "", "reason": reason, "count": count}
        for reason, count in counts.items()
        if count
    ]
    add_counts(
        connection, drop_counts, rows, key=("scenario", "trainer", "reason"), columns=("count",)
    )


class DropCounters:
    """The drop counts of one scenario."""

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario

    def add(self, reason: str, count: int = 1, *, trainer: str | None = None) -> None:
        """Count ``count`` more items dropped for ``reason``, in a transaction of its own."""
        if count < 0:
            raise ValueError(f"a drop count only grows; got {count} for {reason!r}")
        with self._database.write() as connection:
            add_drops(connection, self.scenario, {reason: count}, trainer=trainer)

    def counts(self) -> dict[str | None, dict[str, int]]:
        """Every count of the scenario: trainer (``None``: the scenario's own) → reason → n."""
        query = select(drop_counts.c.trainer, drop_counts.c.reason, drop_counts.c["count"]).where(
            drop_counts.c.scenario == self.scenario
        )
        result: dict[str | None, dict[str, int]] = {}
        with self._database.read() as connection:
            for trainer, reason, count in connection.execute(query):
                result.setdefault(trainer or None, {})[reason] = int(count)
        return result
