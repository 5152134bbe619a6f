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

Reading in store order from a cursor is one index range from the cursor on both databases
(:func:`after_cursor`). PostgreSQL seeks an index on ``(..., commit_tx, seq)`` to the row
comparison ``(commit_tx, seq) > (c, s)``. SQLite seeks with it on ``commit_tx`` alone and, every
``commit_tx`` being 0, walks the scenario's rows from the start; there the read is the rows of
``commit_tx = c AND seq > s`` followed by those of ``commit_tx > c``, each a range of the index,
merged in store order. A test checks both databases' plans for every such read.
"""

from __future__ import annotations

import hashlib
from typing import Any

import attrs
from sqlalchemy import (
    BindParameter,
    ColumnElement,
    CompoundSelect,
    Connection,
    Select,
    bindparam,
    func,
    select,
    tuple_,
    union_all,
)

__all__ = ["Position", "after_cursor", "cursor_parameters", "lock_store_order"]


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


def after_cursor(
    dialect: str,
    query: Select[Any],
    commit_tx: ColumnElement[int],
    seq: ColumnElement[int],
    *,
    order: tuple[str, str] = ("commit_tx", "seq"),
    limit: bool = False,
    before: bool = False,
) -> Select[Any] | CompoundSelect[Any]:
    """``query``'s rows stored after a cursor, in store order, read as an index range from
    the cursor (see the module docstring); with ``before``, those stored before it, newest
    first.

    The statement takes the cursor as the parameters :func:`cursor_parameters` gives, and
    ``limit`` with ``limit=True``.

    :param dialect: the database's (:attr:`reef.storage.Database.dialect`).
    :param commit_tx, seq: the position's columns, the last two of an index whose other columns
        ``query`` fixes by equality.
    :param order: the names under which ``query``'s result holds ``commit_tx`` and ``seq``.
    """
    tx: BindParameter[int] = bindparam("cursor_tx")
    cursor_seq: BindParameter[int] = bindparam("cursor_seq")
    ordered: Select[Any] | CompoundSelect[Any]
    if dialect == "sqlite":
        same = (seq < cursor_seq) if before else (seq > cursor_seq)
        past = (commit_tx < tx) if before else (commit_tx > tx)
        both = union_all(query.where(commit_tx == tx, same), query.where(past))
        columns = [both.selected_columns[name] for name in order]
        ordered = both.order_by(*(c.desc() if before else c for c in columns))
    else:
        row, edge = tuple_(commit_tx, seq), tuple_(tx, cursor_seq)
        ordered = query.where((row < edge) if before else (row > edge))
        ordered = ordered.order_by(*(c.desc() if before else c for c in (commit_tx, seq)))
    return ordered.limit(bindparam("limit")) if limit else ordered


def cursor_parameters(cursor: Position | None) -> dict[str, int]:
    """The parameters of an :func:`after_cursor` statement for ``cursor`` (from the start of
    store order when ``None``: no stored position is negative)."""
    start = cursor or Position(-1, -1)
    return {"cursor_tx": start.commit_tx, "cursor_seq": start.seq}
