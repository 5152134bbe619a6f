"""Opening a Reef database: engine setup, durability settings and schema migrations.

``open_database(url)`` is the one way in. It makes the engine, brings the schema to the head of
the migrations that ship in :mod:`reef.storage.migrations` (under a lock, so processes that open
the same database at once do not race), and returns a :class:`Database` that the stores share.

SQLite (the default, a file) is set up for a single machine with several processes:

- ``journal_mode=WAL``: readers never block the writer and the writer never blocks readers;
- ``synchronous=FULL`` by default: each commit is on disk before it returns, so what admission
  acknowledged survives a power loss or an OS crash, not only a crash of the process
  (``NORMAL`` survives a process crash but may lose the last commits on power loss; pass
  ``sqlite_synchronous="NORMAL"`` to trade that for faster commits);
- ``foreign_keys=ON`` and a ``busy_timeout``, so a writer waits for another instead of failing;
- write transactions start with ``BEGIN IMMEDIATE``: a transaction that reads then writes takes
  the write lock first, so it cannot fail halfway on a lock upgrade.

PostgreSQL is used as given by its URL (``postgresql+psycopg://...``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterator
from typing import Any, Final, Literal

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine, create_engine, event, func, select, text
from sqlalchemy.engine import make_url

__all__ = ["Database", "HeldWriter", "open_database"]

SqliteSynchronous = Literal["FULL", "NORMAL", "EXTRA"]

#: How long a SQLite writer waits for the write lock before it fails.
SQLITE_BUSY_TIMEOUT_MS: Final = 30_000

#: The PostgreSQL advisory lock that serialises migrations (a stable 63-bit number).
MIGRATION_LOCK_KEY: Final = (
    int.from_bytes(hashlib.blake2b(b"reef.storage.migrations", digest_size=8).digest(), "big") >> 1
)

_READ_ONLY: Final = "reef_read_only"

# The setting (of no scenario) that a probe write of some size writes and removes again.
_PROBE_KEY: Final = "reef.store-probe"
_DELETE_PROBE: Final = text("DELETE FROM reef_scenario_settings WHERE scenario = '' AND key = :key")
_INSERT_PROBE: Final = text(
    "INSERT INTO reef_scenario_settings (scenario, key, value) VALUES ('', :key, :value)"
)


class Database:
    """An opened, migrated Reef database: the engine and how transactions begin.

    Stores take a ``Database`` and run each operation in one transaction of their own:
    :meth:`write` for anything that changes rows, :meth:`read` for reads.
    """

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self.engine.dialect.name

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction: committed when the block ends, rolled back if it raises."""
        with self.engine.begin() as connection:
            yield connection

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction (one consistent snapshot, no write lock)."""
        with self.engine.connect() as connection:
            connection = connection.execution_options(**{_READ_ONLY: True})
            with connection.begin():
                yield connection

    def probe_write(self, size: int = 0) -> None:
        """Learn whether the database can write now (a full disk, a file-size limit, a lost
        server): commit a write of ``size`` bytes (incompressible, in a setting of its own,
        removed again in a second transaction), or, for a ``size`` of 0, one that changes
        nothing (the schema's version row, set to itself).

        Give the size of the write that failed: a write that changes nothing, or a small one,
        fits in pages the database already has, and succeeds on a full disk where a record's
        write does not. :raises sqlalchemy.exc.DBAPIError: when it cannot."""
        with self.write() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = version_num"))
            if size > 0:
                connection.execute(_DELETE_PROBE, {"key": _PROBE_KEY})
                connection.execute(
                    _INSERT_PROBE, {"key": _PROBE_KEY, "value": os.urandom(size // 2 + 1).hex()}
                )
        if size > 0:
            with self.write() as connection:
                connection.execute(_DELETE_PROBE, {"key": _PROBE_KEY})

    def held_writer(self) -> HeldWriter:
        """A :class:`HeldWriter`: one connection kept for one thread's write transactions."""
        return HeldWriter(self)

    def dispose(self) -> None:
        """Close every pooled connection."""
        self.engine.dispose()


class HeldWriter:
    """One connection, kept out of the pool, for a thread that writes over and over.

    A writer that commits hundreds of times a second (a scenario's ledger) spends a good share
    of each transaction taking a connection from the pool and giving it back; holding one saves
    that, and on SQLite it lets the writer tell whether anybody else committed since its own
    last transaction (:meth:`others_committed`). When a transaction fails, the connection is
    closed and the next one opens afresh (so a connection PostgreSQL dropped is not reused).
    Not thread-safe: one thread uses it.
    """

    def __init__(self, database: Database) -> None:
        self._database = database
        self._connection: Connection | None = None
        # SQLite's data_version as this connection last saw it, at the end of a transaction.
        self._seen: int | None = None

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction on the held connection, as :meth:`Database.write`."""
        if self._connection is None:
            self._connection = self._database.engine.connect()
        try:
            with self._connection.begin():
                yield self._connection
                self._seen = self._data_version()
        except BaseException:
            self.close()
            raise

    def others_committed(self) -> bool:
        """Inside :meth:`write`: whether another connection may have committed since this
        writer's previous transaction. Always true on PostgreSQL and on a fresh connection;
        on SQLite, read from ``PRAGMA data_version``, which changes for a connection exactly
        when another connection commits."""
        return self._seen is None or self._data_version() != self._seen

    def _data_version(self) -> int | None:
        if self._connection is None or self._database.dialect != "sqlite":
            return None
        # Straight to the driver: this runs on every transaction of a busy writer.
        raw = self._connection.connection.driver_connection
        return int(raw.execute("PRAGMA data_version").fetchone()[0])  # type: ignore[union-attr]

    def close(self) -> None:
        """Give the connection back (the next :meth:`write` opens another)."""
        connection, self._connection, self._seen = self._connection, None, None
        if connection is not None:
            connection.close()


def open_database(url: str, *, sqlite_synchronous: SqliteSynchronous = "FULL") -> Database:
    """Open the database at ``url`` and bring its schema up to date.

    :param url: a SQLAlchemy URL: ``sqlite:///path/to/reef.db`` (the default kind) or
        ``postgresql+psycopg://user@host/db``.
    :param sqlite_synchronous: SQLite's ``synchronous`` setting (see the module docstring).
    :raises NotImplementedError: for a database other than SQLite or PostgreSQL.
    """
    parsed = make_url(url)
    backend = parsed.get_backend_name()
    if backend == "sqlite":
        engine = _sqlite_engine(url, sqlite_synchronous)
    elif backend == "postgresql":
        engine = create_engine(url, pool_pre_ping=True)
    else:
        raise NotImplementedError(
            f"Reef stores data in sqlite or postgresql; {parsed.render_as_string()} is {backend}"
        )
    database = Database(engine)
    try:
        migrate(database)
    except BaseException:
        engine.dispose()
        raise
    return database


def _sqlite_engine(url: str, synchronous: SqliteSynchronous) -> Engine:
    if make_url(url).database in (None, "", ":memory:"):
        raise NotImplementedError("Reef's SQLite stores need a file: sqlite:///path/to/reef.db")
    engine = create_engine(url)

    @event.listens_for(engine, "connect")
    def _configure(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's "begin" event below issue BEGIN, instead of the sqlite3 module's
        # implicit transactions, which start late and never for reads.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute(f"PRAGMA synchronous = {synchronous}")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        read_only = connection.get_execution_options().get(_READ_ONLY, False)
        # Straight to the driver: this runs for every transaction.
        connection.connection.driver_connection.execute(  # type: ignore[union-attr]
            "BEGIN" if read_only else "BEGIN IMMEDIATE"
        )

    return engine


def migrate(database: Database) -> None:
    """Upgrade the schema to the newest migration, holding a lock against other openers.

    On SQLite the write transaction itself is the lock (``BEGIN IMMEDIATE``); on PostgreSQL a
    transaction-scoped advisory lock, taken before Alembic reads its version table.
    """
    config = Config()
    config.set_main_option("script_location", "reef.storage:migrations")
    with database.write() as connection:
        if database.dialect == "postgresql":
            connection.execute(select(func.pg_advisory_xact_lock(MIGRATION_LOCK_KEY)))
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
