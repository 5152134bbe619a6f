"""A job's end, one durable step, and the last job outcome of each trainer (P-PIPE-12, 13)."""

from __future__ import annotations

import time

from sqlalchemy import select

from reef.storage import json_values
from reef.storage.drops import FAILED_JOB, add_drops
from reef.storage.job_history import JobHistory
from reef.storage.samples.sample_rows import JSON, SampleRows
from reef.storage.tables import job_outcomes
from reef.storage.trainer_state import TrainerState
from reef.storage.upserts import insert_or_replace

__all__ = ["JobOutcomes"]


class JobOutcomes(SampleRows):
    """The last job outcome of each trainer of one scenario."""

    def record_job_outcome(self, trainer: str, outcome: JSON) -> None:
        """Make the end of ``trainer``'s job durable, in one transaction, before the trainer
        acts on it (P-PIPE-12): the outcome (``job_id``, ``event``, ``metrics``, ``error``)
        becomes the trainer's last; the job history notes the end; a failed job's samples
        that went to the component are counted as dropped (``failed_job``: their training
        was thrown away, and they never train again for this trainer, P-PIPE-10); and the
        trainer's running job is cleared. A crash leaves all of it or none: a restart finds
        the job either running (and asks its component) or ended (and replays its outcome
        first, P-PIPE-13), never both.

        Metrics that are not finite (a NaN loss) are kept as they are: the outcome read back
        is the outcome recorded.
        """
        row = {
            "scenario": self.scenario,
            "trainer": trainer,
            "body": json_values.dump_numbers(outcome),
            "ended_at": time.time(),
        }
        event = str(outcome.get("event"))
        with self._database.write() as connection:
            insert_or_replace(connection, job_outcomes, row, key=("scenario", "trainer"))
            sent = JobHistory(self._database, self.scenario).ended_in(
                connection,
                trainer,
                str(outcome.get("job_id")),
                event,
                outcome.get("metrics") or {},
                outcome.get("error"),
            )
            if event == "failed" and sent:
                add_drops(connection, self.scenario, {FAILED_JOB: sent}, trainer=trainer)
            state = TrainerState(self._database, self.scenario)
            state.set_running_job_in(connection, trainer, None)

    def last_job_outcome(self, trainer: str) -> JSON | None:
        """The last job outcome recorded for ``trainer``; ``None`` before its first job ends."""
        query = select(job_outcomes.c.body).where(
            job_outcomes.c.scenario == self.scenario, job_outcomes.c.trainer == trainer
        )
        with self._database.read() as connection:
            body = connection.execute(query).scalar_one_or_none()
        return None if body is None else dict(json_values.load(body))
