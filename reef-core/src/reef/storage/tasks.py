"""Task stores: named key/value stores of JSON values, one set per scenario.

A stage that keeps state of its own (the generated-task recipe keeps its candidates,
publications, splits and results) opens a store by name with
``context.task_storage.open(name)``; in a composite recipe each component opens its names
under its component name. Each write is one transaction.

:class:`TaskStorage` and :class:`TaskStore` are the SQL implementations of the
:class:`TaskStores` and :class:`KeyValueStore` protocols; a test of a stage may give it an
in-memory fake of the protocols instead (the protocols are :mod:`reef.core.task_stores`').
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import delete, select

from reef.core.task_stores import KeyValueStore, TaskStores
from reef.storage import json_values
from reef.storage.database import Database
from reef.storage.tables import task_entries
from reef.storage.upserts import insert_or_ignore, insert_or_replace

__all__ = ["KeyValueStore", "TaskStorage", "TaskStore", "TaskStores"]


class TaskStore:
    """The task store ``name`` of a scenario, in the database."""

    def __init__(self, database: Database, scenario: str, name: str) -> None:
        self._database = database
        self.scenario = scenario
        self.name = name

    def _where(self) -> tuple[Any, ...]:
        return (task_entries.c.scenario == self.scenario, task_entries.c.store == self.name)

    def _row(self, key: str, value: Any) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "store": self.name,
            "key": key,
            "value": json_values.dump(value),
        }

    def get(self, key: str) -> Any | None:
        """The value under ``key``, or ``None``."""
        query = select(task_entries.c.value).where(*self._where(), task_entries.c.key == key)
        with self._database.read() as connection:
            text = connection.execute(query).scalar_one_or_none()
        return None if text is None else json_values.load(text)

    def put(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key``, replacing what was there; the key keeps its place."""
        row = self._row(key, value)
        with self._database.write() as connection:
            insert_or_replace(connection, task_entries, row, key=("scenario", "store", "key"))

    def put_new(self, key: str, value: Any) -> bool:
        """Store ``value`` under ``key`` unless the key is taken; True when stored now."""
        row = self._row(key, value)
        with self._database.write() as connection:
            taken = connection.execute(
                select(task_entries.c.seq).where(*self._where(), task_entries.c.key == key)
            ).first()
            if taken is not None:
                return False
            insert_or_ignore(connection, task_entries, [row])
        return True

    def delete(self, key: str) -> bool:
        """Remove ``key``; True when it was there."""
        with self._database.write() as connection:
            result = connection.execute(
                delete(task_entries).where(*self._where(), task_entries.c.key == key)
            )
        return bool(result.rowcount)

    def items(self) -> Iterator[tuple[str, Any]]:
        """Every key and value, in the order the keys were first stored (one snapshot)."""
        query = (
            select(task_entries.c.key, task_entries.c.value)
            .where(*self._where())
            .order_by(task_entries.c.seq)
        )
        with self._database.read() as connection:
            rows = [(key, text) for key, text in connection.execute(query)]
        return iter([(key, json_values.load(text)) for key, text in rows])


class TaskStorage:
    """The task stores of one scenario (``PipelineContext.task_storage``)."""

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario

    def open(self, name: str) -> TaskStore:
        """The store called ``name``; nothing is written until a value is."""
        if not name:
            raise ValueError("a task store needs a non-empty name")
        return TaskStore(self._database, self.scenario, name)
