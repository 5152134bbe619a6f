"""Inserts that meet an existing row: the only dialect-specific statements of the stores.

Ids in Reef are deterministic, so most writes may find their row already there. SQLite and
PostgreSQL both speak ``INSERT ... ON CONFLICT``; SQLAlchemy spells it through each dialect's
own ``insert``, chosen here once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Select, Table
from sqlalchemy.dialects import postgresql, sqlite

__all__ = [
    "add_counts",
    "add_counts_statement",
    "dialect_insert",
    "insert_or_ignore",
    "insert_or_replace",
    "insert_selected_or_ignore",
]


def _insert(connection: Connection, table: Table) -> Any:
    return dialect_insert(connection.dialect.name, table)


def dialect_insert(dialect: str, table: Table) -> Any:
    """The ``INSERT`` of ``dialect`` into ``table``, which knows ``ON CONFLICT``.

    Stores build the statements of hot paths once, with this, and execute them many times.
    """
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise NotImplementedError(f"Reef's stores support sqlite and postgresql, not {dialect}")


def insert_or_ignore(
    connection: Connection, table: Table, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Insert ``rows``, leaving alone any row whose key is already stored."""
    if rows:
        connection.execute(_insert(connection, table).on_conflict_do_nothing(), list(rows))


def insert_selected_or_ignore(
    connection: Connection, table: Table, columns: Sequence[str], rows: Select[Any]
) -> None:
    """Insert the rows that ``rows`` selects (into ``columns``), skipping keys already stored."""
    statement = _insert(connection, table).from_select(list(columns), rows)
    connection.execute(statement.on_conflict_do_nothing())


def insert_or_replace(
    connection: Connection, table: Table, row: Mapping[str, Any], *, key: Sequence[str]
) -> None:
    """Insert ``row``, or overwrite the other columns of the row stored under ``key``."""
    statement = _insert(connection, table)
    changed = {name: statement.excluded[name] for name in row if name not in key}
    connection.execute(statement.on_conflict_do_update(index_elements=key, set_=changed), row)


def add_counts_statement(
    dialect: str, table: Table, *, key: Sequence[str], columns: Sequence[str]
) -> Any:
    """The statement that adds a row's ``columns`` to the counts stored under its ``key`` (a
    new row starts them); a hot path builds it once and executes it many times."""
    statement = dialect_insert(dialect, table)
    totals = {name: table.c[name] + statement.excluded[name] for name in columns}
    return statement.on_conflict_do_update(index_elements=key, set_=totals)


def add_counts(
    connection: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    key: Sequence[str],
    columns: Sequence[str],
) -> None:
    """Add each row's ``columns`` to the stored counts under its ``key`` (a new row starts them)."""
    if rows:
        statement = add_counts_statement(connection.dialect.name, table, key=key, columns=columns)
        connection.execute(statement, list(rows))
