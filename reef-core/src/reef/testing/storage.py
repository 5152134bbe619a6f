"""Pytest fixtures that give a test a fresh Reef database, on SQLite and on PostgreSQL.

A suite opts in with ``pytest_plugins = ["reef.testing"]`` in its top ``conftest.py`` (or
``pytest -p reef.testing``); no other pytest run where reef-core is installed gets them:

- ``storage_url``: the URL of an empty database. Parametrised: every test that uses it runs on
  SQLite (a file in the test's ``tmp_path``) and, when ``REEF_TEST_DATABASE_URL`` names a
  PostgreSQL database, on PostgreSQL too, in a schema of its own that is dropped afterwards (so
  concurrent runs never meet). Without the variable the PostgreSQL case is skipped.
- ``storage_database``: that database, opened (and migrated) with
  :func:`reef.storage.open_database`, disposed after the test.
- ``postgres_url``: the URL of a fresh schema of that PostgreSQL database, for a test that
  needs PostgreSQL itself (several processes on one store); skipped without the variable.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from reef.storage.database import Database, open_database

__all__ = ["postgres_schema_url", "postgres_url", "storage_database", "storage_url"]

#: The environment variable that names the PostgreSQL database of the tests.
DATABASE_URL_VARIABLE = "REEF_TEST_DATABASE_URL"


@pytest.fixture(
    params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)],
)
def storage_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The URL of an empty database: SQLite, then PostgreSQL when configured."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("reef-db") / "reef.db"
        yield f"sqlite:///{path}"
        return
    with postgres_schema_url(_postgres_base()) as url:
        yield url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """The URL of a fresh schema in the PostgreSQL database of the tests, dropped after the
    test; the test is skipped when ``REEF_TEST_DATABASE_URL`` names none."""
    with postgres_schema_url(_postgres_base()) as url:
        yield url


def _postgres_base() -> str:
    base = os.environ.get(DATABASE_URL_VARIABLE)
    if not base:
        pytest.skip(f"{DATABASE_URL_VARIABLE} does not name a PostgreSQL database")
    return base


@contextlib.contextmanager
def postgres_schema_url(base: str) -> Iterator[str]:
    """A fresh schema in the PostgreSQL database at ``base``, as a URL whose connections use it.

    The schema is created on entry and dropped, with everything in it, on exit.
    """
    schema = f"reef_test_{uuid.uuid4().hex[:12]}"
    engine = create_engine(base)
    try:
        with engine.begin() as connection:
            connection.execute(text(f'CREATE SCHEMA "{schema}"'))
        url = make_url(base).update_query_dict({"options": f"-csearch_path={schema}"})
        yield url.render_as_string(hide_password=False)
    finally:
        with engine.begin() as connection:
            connection.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))
        engine.dispose()


@pytest.fixture
def storage_database(storage_url: str) -> Iterator[Database]:
    """The database at ``storage_url``, opened and migrated; disposed after the test."""
    database = open_database(storage_url)
    try:
        yield database
    finally:
        database.dispose()
