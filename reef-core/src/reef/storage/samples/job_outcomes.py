"""The last job outcome of each trainer, durable before the trainer acts on it (P-PIPE-13)."""

from __future__ import annotations

import time

from sqlalchemy import select

from reef.storage import json_values
from reef.storage.samples.sample_rows import JSON, SampleRows
from reef.storage.tables import job_outcomes
from reef.storage.upserts import insert_or_replace

__all__ = ["JobOutcomes"]


class JobOutcomes(SampleRows):
    """The last job outcome of each trainer of one scenario."""

    def record_job_outcome(self, trainer: str, outcome: JSON) -> None:
        """Make ``trainer``'s last job outcome durable (before the trainer acts on it).

        Metrics that are not finite (a NaN loss) are kept as they are: the outcome read back
        is the outcome recorded.
        """
        row = {
            "scenario": self.scenario,
            "trainer": trainer,
            "body": json_values.dump_numbers(outcome),
            "ended_at": time.time(),
        }
        with self._database.write() as connection:
            insert_or_replace(connection, job_outcomes, row, key=("scenario", "trainer"))

    def last_job_outcome(self, trainer: str) -> JSON | None:
        """The last job outcome recorded for ``trainer``; ``None`` before its first job ends."""
        query = select(job_outcomes.c.body).where(
            job_outcomes.c.scenario == self.scenario, job_outcomes.c.trainer == trainer
        )
        with self._database.read() as connection:
            body = connection.execute(query).scalar_one_or_none()
        return None if body is None else dict(json_values.load(body))
