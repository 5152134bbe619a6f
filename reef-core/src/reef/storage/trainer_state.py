"""What each trainer keeps beside its samples: the job it is running.

The *running job* is written before the trainer submits job data to its component and cleared
in the transaction that commits the job's end (with the trainer's last job outcome and its end
in the job history), so a restart finds the job either running or ended, never both. A trainer
that starts and finds one knows a job of it was in flight: it asks the component how it ended
instead of replaying the last outcome (P-PIPE-13), and it can commit the submission that a
crash interrupted. It is written by the trainer that holds the lease, through its fenced
database.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, Connection, PrimaryKeyConstraint, String, Table, Text, select

from reef.storage import json_values
from reef.storage.database import Database
from reef.storage.tables import metadata
from reef.storage.upserts import insert_or_replace

__all__ = ["TrainerState", "trainer_state"]

JSON = dict[str, Any]

trainer_state = Table(
    "reef_trainer_state",
    metadata,
    Column("scenario", String(400), nullable=False),
    Column("trainer", String(400), nullable=False),
    Column("running_job", Text, nullable=True),
    PrimaryKeyConstraint("scenario", "trainer"),
    comment="The job each trainer submitted and whose end is not committed yet.",
)


class TrainerState:
    """The trainers' state rows of one scenario."""

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario

    def set_running_job(self, trainer: str, job: JSON | None) -> None:
        """Record the job ``trainer`` is about to submit (``None``: its end is committed)."""
        with self._database.write() as connection:
            self.set_running_job_in(connection, trainer, job)

    def set_running_job_in(self, connection: Connection, trainer: str, job: JSON | None) -> None:
        """:meth:`set_running_job`, inside the caller's transaction (the one that commits a
        job's end clears its running job: ``TrainerSamples.record_job_outcome``)."""
        row = {
            "scenario": self.scenario,
            "trainer": trainer,
            "running_job": None if job is None else json_values.dump(job),
        }
        insert_or_replace(connection, trainer_state, row, key=("scenario", "trainer"))

    def running_job(self, trainer: str) -> JSON | None:
        """The job ``trainer`` submitted and whose end is not committed, if any."""
        query = select(trainer_state.c.running_job).where(
            trainer_state.c.scenario == self.scenario, trainer_state.c.trainer == trainer
        )
        with self._database.read() as connection:
            body = connection.execute(query).scalar_one_or_none()
        return None if body is None else dict(json_values.load(body))
