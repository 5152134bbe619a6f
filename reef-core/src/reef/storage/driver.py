"""Statements sent straight to the database driver, for the stores' hottest writes.

SQLAlchemy spends more time on each statement (compiling or looking up the cached compilation,
binding parameters, events, making a result) than SQLite takes to run a small insert. A hot
path of a few fixed inserts per transaction (storing a unit of samples) therefore runs them on
the driver's own cursor, inside the transaction that :meth:`~reef.storage.database.Database.write`
opened: the transaction itself, its ``BEGIN IMMEDIATE``, commit and rollback stay SQLAlchemy's,
so durability and atomicity are those of every other write.

The statements are plain SQL that SQLite and PostgreSQL run alike, written with ``?``
placeholders; :func:`driver_sql` gives them in the driver's own style. Errors come out as
SQLAlchemy's (``sqlalchemy.exc.OperationalError``, ``IntegrityError``, ...), as from any other
statement, so callers that handle a full disk or a lost server see no difference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

__all__ = ["driver_cursor", "driver_sql"]


def driver_sql(dialect: str, sql: str) -> str:
    """``sql``, written with ``?`` placeholders, in the placeholder style of ``dialect``'s
    driver: sqlite3 takes ``?``, psycopg ``%s``."""
    if dialect == "sqlite":
        return sql
    if dialect == "postgresql":
        return sql.replace("?", "%s")
    raise NotImplementedError(f"Reef's stores support sqlite and postgresql, not {dialect}")


@contextlib.contextmanager
def driver_cursor(connection: Connection) -> Iterator[Any]:
    """The driver's cursor on ``connection``, in its open transaction; closed after the block.

    A driver error raised in the block comes out as SQLAlchemy's error for it; one that means
    the connection is lost also invalidates ``connection``, as SQLAlchemy does for its own
    statements.
    """
    driver_error = connection.dialect.loaded_dbapi.Error
    try:
        cursor = connection.connection.cursor()
        try:
            yield cursor
        finally:
            cursor.close()
    except driver_error as exc:
        lost = connection.dialect.is_disconnect(exc, connection.connection, None)
        if lost:
            connection.invalidate(exc)
        raise DBAPIError.instance(
            None, None, exc, driver_error, connection_invalidated=lost, dialect=connection.dialect
        ) from exc
