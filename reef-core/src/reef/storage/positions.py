"""Store order, and the gap rule that lets a reader follow it with a cursor.

A reader (the trainer) follows the record store with a cursor: "give me what was stored after
the last row I saw". With a plain sequence number that is wrong on PostgreSQL: two writers take
sequence values 7 and 8, the one holding 8 commits first, a reader sees 8 and moves its cursor
past 7, and row 7 is lost to it when it commits a moment later.

Reef orders such rows by ``(commit_tx, seq)``: ``commit_tx`` is the id of the writing
transaction (``pg_current_xact_id()``), ``seq`` breaks ties inside one transaction. A reader
returns only rows whose ``commit_tx`` is below the oldest transaction still running
(``pg_snapshot_xmin(pg_current_snapshot())``). Every transaction with a smaller id has ended,
so no row can later appear *before* a row already returned, and the cursor never steps over a
gap that a running transaction may still fill. A transaction that is still open holds back
readers of rows written after it began (latency, never loss); read-only transactions have no
id and hold back nothing.

SQLite has one writer at a time and assigns ``seq`` inside the write lock, so sequence order is
commit order already: ``commit_tx`` is 0 and there is no horizon.
"""

from __future__ import annotations

from typing import Any

import attrs
from sqlalchemy import ColumnElement, Connection, literal, literal_column, select, tuple_

__all__ = ["Position", "after", "before_horizon", "commit_tx_value"]


@attrs.frozen(order=True)
class Position:
    """A row's place in store order; also a reader's cursor (the last position it read).

    Positions compare in store order. They are stable: a stored row keeps its position.
    """

    commit_tx: int
    seq: int

    def __str__(self) -> str:
        return f"{self.commit_tx}.{self.seq}"


def commit_tx_value(dialect: str) -> ColumnElement[Any]:
    """The ``commit_tx`` value for rows written by a transaction on ``dialect``."""
    if dialect == "postgresql":
        return literal_column("pg_current_xact_id()::text::bigint")
    return literal(0)


def before_horizon(connection: Connection, commit_tx: ColumnElement[Any]) -> ColumnElement[bool]:
    """A condition true for rows whose writing transaction can no longer be running."""
    if connection.dialect.name == "postgresql":
        horizon: ColumnElement[Any] = literal_column(
            "pg_snapshot_xmin(pg_current_snapshot())::text::bigint"
        )
        return commit_tx < select(horizon).scalar_subquery()
    return literal(True)


def after(
    commit_tx: ColumnElement[Any], seq: ColumnElement[Any], cursor: Position | None
) -> ColumnElement[bool]:
    """A condition true for rows stored after ``cursor`` (every row when it is ``None``)."""
    if cursor is None:
        return literal(True)
    return tuple_(commit_tx, seq) > tuple_(literal(cursor.commit_tx), literal(cursor.seq))
