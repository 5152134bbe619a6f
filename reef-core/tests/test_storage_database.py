"""Opening a Reef database: migrations, durability settings, concurrent openers."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from reef.storage import Database, open_database
from reef.storage.driver import driver_cursor
from reef.storage.tables import metadata


def test_migrated_schema_matches_the_table_metadata(storage_database: Database) -> None:
    """The migrations produce exactly the tables the code uses: autogenerate finds no diff."""
    with storage_database.engine.connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), metadata)
    assert diff == []


def test_reopening_a_migrated_database_keeps_its_rows(storage_url: str) -> None:
    first = open_database(storage_url)
    with first.write() as connection:
        connection.execute(text("INSERT INTO reef_scenarios (scenario) VALUES ('kept')"))
    first.dispose()
    second = open_database(storage_url)
    with second.read() as connection:
        rows = connection.execute(text("SELECT scenario FROM reef_scenarios")).scalars().all()
        version = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    second.dispose()
    assert rows == ["kept"]
    assert version == "0006"


def test_sqlite_is_opened_with_wal_full_sync_and_foreign_keys(tmp_path: object) -> None:
    database = open_database(f"sqlite:///{tmp_path}/reef.db")
    with database.read() as connection:
        pragmas = {
            name: connection.exec_driver_sql(f"PRAGMA {name}").scalar()
            for name in ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
        }
    database.dispose()
    # synchronous: 2 is FULL (each commit reaches the disk before it returns).
    assert pragmas == {
        "journal_mode": "wal",
        "synchronous": 2,
        "foreign_keys": 1,
        "busy_timeout": 30_000,
    }


def test_processes_opening_a_new_database_at_once_do_not_race(storage_url: str) -> None:
    """Several processes migrate the same fresh database together; all succeed, one schema."""
    opener = "import sys; from reef.storage import open_database; open_database(sys.argv[1])"
    processes = [
        subprocess.Popen([sys.executable, "-c", opener, storage_url], stderr=subprocess.PIPE)
        for _ in range(4)
    ]
    errors = [p.communicate(timeout=120)[1].decode() for p in processes]
    assert [p.returncode for p in processes] == [0, 0, 0, 0], errors
    database = open_database(storage_url)
    with database.read() as connection:
        versions = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    database.dispose()
    assert [tuple(v) for v in versions] == [("0006",)]


def _scenario_row(database: Database, name: str) -> None:
    with database.write() as connection:
        connection.execute(text("INSERT INTO reef_scenarios (scenario) VALUES (:s)"), {"s": name})


def test_a_held_writer_tells_whether_another_connection_committed(
    storage_database: Database,
) -> None:
    """A held writer's own commits do not count; another connection's commit does (SQLite).
    PostgreSQL has no such signal: there the answer is always yes."""
    writer = storage_database.held_writer()
    try:
        with writer.write() as connection:
            assert writer.others_committed()  # a fresh connection knows nothing yet
            connection.execute(text("INSERT INTO reef_scenarios (scenario) VALUES ('own')"))
        with writer.write():
            own_only = writer.others_committed()
        _scenario_row(storage_database, "other")  # a pooled connection: somebody else
        with writer.write():
            after_other = writer.others_committed()
        with writer.write():
            quiet_again = writer.others_committed()
    finally:
        writer.close()
    if storage_database.dialect == "sqlite":
        assert (own_only, after_other, quiet_again) == (False, True, False)
    else:
        assert (own_only, after_other, quiet_again) == (True, True, True)


def test_a_held_writer_rolls_back_and_starts_afresh_after_a_failed_transaction(
    storage_database: Database,
) -> None:
    writer = storage_database.held_writer()
    try:
        with writer.write():
            pass

        def fail() -> None:
            with writer.write() as connection:
                connection.execute(text("INSERT INTO reef_scenarios (scenario) VALUES ('lost')"))
                raise RuntimeError("the block failed")

        with pytest.raises(RuntimeError, match="the block failed"):
            fail()
        with writer.write() as connection:
            # The failed transaction took nothing, and the writer no longer vouches for
            # what it saw before: the next batch catches up.
            assert writer.others_committed()
            rows = connection.execute(text("SELECT scenario FROM reef_scenarios")).all()
    finally:
        writer.close()
    assert rows == []


def _insert_after_the_server_dropped_the_connection(database: Database) -> None:
    with database.write() as connection:
        pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with database.engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
        with driver_cursor(connection) as cursor:
            cursor.execute("INSERT INTO reef_scenarios (scenario) VALUES ('lost')")


def test_a_connection_lost_under_a_driver_level_insert_is_invalidated_as_sqlalchemy_does(
    storage_database: Database,
) -> None:
    """The driver-level inserts (reef.storage.driver) fail like SQLAlchemy's own statements when
    the server drops the connection: SQLAlchemy's error carrying the server's reason (not a
    second failure of the rollback on the dead connection), the connection marked invalidated,
    and the next write works."""
    if storage_database.dialect != "postgresql":
        pytest.skip("a server that drops a connection is PostgreSQL's")
    psycopg = pytest.importorskip("psycopg")
    with pytest.raises(DBAPIError) as failed:
        _insert_after_the_server_dropped_the_connection(storage_database)
    assert isinstance(failed.value.orig, psycopg.errors.AdminShutdown)
    assert failed.value.connection_invalidated
    with storage_database.write() as connection:
        connection.execute(text("INSERT INTO reef_scenarios (scenario) VALUES ('next')"))
    with storage_database.read() as connection:
        rows = connection.execute(text("SELECT scenario FROM reef_scenarios")).scalars().all()
    assert rows == ["next"]
