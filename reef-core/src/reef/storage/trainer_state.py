"""What each trainer keeps beside its samples: a status snapshot and the job it is running.

- The *status snapshot* is what ``GET /reef/status`` shows of a trainer: the trainer writes it
  after each step and at every poll, so any process of the deployment (also one that does not
  run the trainer) can answer with it. It is a JSON object; ``docs/trainer.md`` lists its keys.
- The *running job* is written before the trainer submits job data to its component and cleared
  once the job's end is committed. A trainer that starts and finds one knows a job of it was in
  flight: it asks the component how it ended instead of replaying the last outcome
  (P-PIPE-13), and it can commit the submission that a crash interrupted.

Both are written by the trainer that holds the lease, through its fenced database.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Column, Float, PrimaryKeyConstraint, String, Table, Text, select

from reef.storage import json_values
from reef.storage.database import Database
from reef.storage.tables import metadata
from reef.storage.upserts import insert_or_ignore

__all__ = ["TrainerState", "trainer_state"]

JSON = dict[str, Any]

trainer_state = Table(
    "reef_trainer_state",
    metadata,
    Column("scenario", String(400), nullable=False),
    Column("trainer", String(400), nullable=False),
    Column("status", Text, nullable=True),
    Column("status_at", Float, nullable=True),
    Column("running_job", Text, nullable=True),
    PrimaryKeyConstraint("scenario", "trainer"),
    comment="Each trainer's status snapshot and the job it submitted and has not ended.",
)


class TrainerState:
    """The trainers' state rows of one scenario."""

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario

    def _update(self, trainer: str, **values: Any) -> None:
        with self._database.write() as connection:
            insert_or_ignore(
                connection, trainer_state, [{"scenario": self.scenario, "trainer": trainer}]
            )
            connection.execute(
                trainer_state.update()
                .where(
                    trainer_state.c.scenario == self.scenario, trainer_state.c.trainer == trainer
                )
                .values(**values)
            )

    def write_status(self, trainer: str, snapshot: JSON) -> None:
        """Replace ``trainer``'s status snapshot (a JSON object)."""
        self._update(trainer, status=json_values.dump(snapshot), status_at=time.time())

    def statuses(self) -> dict[str, JSON]:
        """Every trainer's last snapshot, by trainer (trainers that never wrote one are left
        out)."""
        query = select(trainer_state.c.trainer, trainer_state.c.status).where(
            trainer_state.c.scenario == self.scenario, trainer_state.c.status.is_not(None)
        )
        with self._database.read() as connection:
            rows = list(connection.execute(query))
        return {trainer: dict(json_values.load(body)) for trainer, body in rows}

    def set_running_job(self, trainer: str, job: JSON | None) -> None:
        """Record the job ``trainer`` is about to submit (``None``: its end is committed)."""
        self._update(trainer, running_job=None if job is None else json_values.dump(job))

    def running_job(self, trainer: str) -> JSON | None:
        """The job ``trainer`` submitted and whose end is not committed, if any."""
        query = select(trainer_state.c.running_job).where(
            trainer_state.c.scenario == self.scenario, trainer_state.c.trainer == trainer
        )
        with self._database.read() as connection:
            body = connection.execute(query).scalar_one_or_none()
        return None if body is None else dict(json_values.load(body))
