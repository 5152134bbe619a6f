"""The key/value stores a stage keeps state in, as the stage sees them: two protocols.

A stage opens a store by name through ``context.task_storage`` (:class:`TaskStores`) and reads
and writes JSON values in it (:class:`KeyValueStore`). :mod:`reef.storage.tasks` implements
them in the database; a stage's test may give an in-memory fake instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol


class KeyValueStore(Protocol):
    """A durable map from string keys to JSON values, in insertion order."""

    def get(self, key: str) -> Any | None:
        """The value under ``key``, or ``None``."""

    def put(self, key: str, value: Any) -> None:
        """Store ``value`` under ``key``, replacing what was there (durable on return)."""

    def put_new(self, key: str, value: Any) -> bool:
        """Store ``value`` under ``key`` unless the key is taken; True when stored now."""

    def delete(self, key: str) -> bool:
        """Remove ``key``; True when it was there."""

    def items(self) -> Iterator[tuple[str, Any]]:
        """Every key and value, in the order the keys were first stored."""


class TaskStores(Protocol):
    """Opens a scenario's key/value stores by name."""

    def open(self, name: str) -> KeyValueStore:
        """The store called ``name`` (created empty when first opened)."""
