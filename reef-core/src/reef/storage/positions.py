"""Store order, and the rule that lets a reader follow it with a cursor.

A reader (the trainer) follows the record store with a cursor: "give me what was stored after
the last row I saw". With a plain sequence number that can be wrong on PostgreSQL: two writers
take sequence values 7 and 8, the one holding 8 commits first, a reader sees 8 and moves its
cursor past 7, and row 7 is lost to it when it commits a moment later.

So writers of one scenario's ordered rows (records; samples) take a transaction-scoped lock
first (:func:`lock_store_order`, ``pg_advisory_xact_lock``), and only then draw sequence
values. PostgreSQL releases the lock after the commit is visible, so within a scenario commits
happen in sequence order: a reader that sees sequence value 8 sees everything before it, and a
cursor never steps over a gap that a running transaction could still fill. Readers take no lock
and never wait. Writers of one scenario wait for each other only for the length of one short
transaction; the record store's writers serialise on the scenario's usage row anyway.

SQLite has one writer at a time and assigns sequence values inside its write lock, so the
rule holds there with no lock of ours.

Rows carry ``commit_tx`` beside ``seq``; it is 0 for every row written this way (see
``docs/storage.md``, "Decisions").
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
from sqlalchemy import ColumnElement, Connection, func, literal, select, tuple_

__all__ = ["Position", "after", "lock_store_order"]


@attrs.frozen(order=True)
class Position:
    """A row's place in store order; also a reader's cursor (the last position it read).

    Positions compare in store order. They are stable: a stored row keeps its position.
    """

    commit_tx: int
    seq: int

    def __str__(self) -> str:
        return f"{self.commit_tx}.{self.seq}"


def lock_store_order(connection: Connection, store: str, scenario: str) -> None:
    """Serialise the writers of ``scenario``'s ordered rows of ``store`` until this commit."""
    if connection.dialect.name == "postgresql":
        digest = hashlib.blake2b(f"{store}\0{scenario}".encode(), digest_size=8).digest()
        key = int.from_bytes(digest, "big", signed=True)
        connection.execute(select(func.pg_advisory_xact_lock(key)))


def after(
    commit_tx: ColumnElement[Any], seq: ColumnElement[Any], cursor: Position | None
) -> ColumnElement[bool]:
    """A condition true for rows stored after ``cursor`` (every row when it is ``None``)."""
    if cursor is None:
        return literal(True)
    return tuple_(commit_tx, seq) > tuple_(literal(cursor.commit_tx), literal(cursor.seq))
