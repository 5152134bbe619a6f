"""A scenario's durable settings: key → JSON value (the training mode, for one), and the keys
the service and the trainers share in them.

A setting changed through the API (``POST /reef/scenarios/{scenario}/update``) is written here
before it is acted on, so a reload or a restart applies it again (P-MODE-14).
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import delete, select

from reef.pipeline_context import TrainingMode, check_training_mode
from reef.storage import json_values
from reef.storage.database import Database
from reef.storage.tables import scenario_settings
from reef.storage.upserts import insert_or_replace

__all__ = [
    "STATUS_SNAPSHOT_PREFIX",
    "TRAINING_MODE_SETTING",
    "ScenarioSettings",
    "snapshot_key",
    "stored_training_mode",
    "tracker_run_key",
]

#: The scenario setting that holds the selected training mode (written by the HTTP service,
#: P-MODE-14; absent means ``auto``).
TRAINING_MODE_SETTING: Final = "training_mode"

#: The scenario setting prefix under which each trainer writes its status snapshot, which
#: ``GET /reef/status`` reads in any process of the deployment.
STATUS_SNAPSHOT_PREFIX: Final = "trainer_status:"


def snapshot_key(trainer: str) -> str:
    """The scenario setting under which ``trainer`` writes its status snapshot."""
    return f"{STATUS_SNAPSHOT_PREFIX}{trainer}"


def tracker_run_key(trainer: str, tracker: str) -> str:
    """The scenario setting under which ``trainer`` keeps its run in ``tracker``: the run's id
    and the last job it logged, so a restart resumes the run where it stopped."""
    return f"tracker_run:{trainer}:{tracker}"


def stored_training_mode(value: Any) -> TrainingMode:
    """The training mode a stored :data:`TRAINING_MODE_SETTING` value selects (``None``, never
    selected: ``auto``).

    :raises ValueError: for a value that names no training mode.
    """
    return "auto" if value is None else check_training_mode(str(value))


class ScenarioSettings:
    """The settings of one scenario."""

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default`` when it was never set."""
        query = select(scenario_settings.c.value).where(
            scenario_settings.c.scenario == self.scenario, scenario_settings.c.key == key
        )
        with self._database.read() as connection:
            text = connection.execute(query).scalar_one_or_none()
        return default if text is None else json_values.load(text)

    def set(self, key: str, value: Any) -> None:
        """Set ``key`` to ``value`` (durable on return)."""
        row = {"scenario": self.scenario, "key": key, "value": json_values.dump(value)}
        with self._database.write() as connection:
            insert_or_replace(connection, scenario_settings, row, key=("scenario", "key"))

    def delete(self, key: str) -> None:
        """Forget ``key`` (nothing happens when it was never set)."""
        query = delete(scenario_settings).where(
            scenario_settings.c.scenario == self.scenario, scenario_settings.c.key == key
        )
        with self._database.write() as connection:
            connection.execute(query)

    def items(self) -> dict[str, Any]:
        """Every setting of the scenario."""
        query = select(scenario_settings.c.key, scenario_settings.c.value).where(
            scenario_settings.c.scenario == self.scenario
        )
        with self._database.read() as connection:
            rows = [(key, text) for key, text in connection.execute(query)]
        return {key: json_values.load(text) for key, text in rows}
