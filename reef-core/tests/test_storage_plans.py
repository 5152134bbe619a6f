"""Every read that follows a cursor or a keyset through a store seeks an index to it.

Such a read must cost the same with a million rows behind the cursor as with none. Each test
runs the store's own operation, captures the statements it sends, and asks the database for
their plans (SQLite ``EXPLAIN QUERY PLAN``, PostgreSQL ``EXPLAIN`` after ``ANALYZE``, over
enough rows that the planner's choice is the one a full store gets): every access to the table
must be an index search bounded by the cursor, none a scan of the table or a sort of its rows.
Mutating :func:`reef.storage.positions.after_cursor` back to one row-value comparison on
SQLite makes them fail (SQLite then seeks on ``commit_tx`` alone and walks every row of the
scenario).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the ledger's reads are the service's (its server extra)")

from sqlalchemy import event, insert, select, text

from reef.core.records import InferenceRecord
from reef.core.trajectory_index import LinkEntry, TrajectoryIndex
from reef.server.ledger import ScenarioLedger
from reef.storage import (
    Database,
    JobHistory,
    RecordCapacity,
    RecordStore,
    SampleBrowser,
    SampleFilter,
    TrainerSamples,
    open_database,
)
from reef.storage.job_history import jobs
from reef.storage.tables import pending_samples, records, samples

SCENARIO = "support"
#: Rows of history behind the cursor (and of another scenario beside it).
HISTORY = 3_000


def _history(database: Database) -> None:
    """Records, untrained samples and jobs of the scenario and of another, written as rows."""
    rows = [
        {
            "commit_tx": 0,
            "scenario": SCENARIO if n % 3 else "other",
            "id": f"h{n}",
            "kind": "inference" if n % 2 else "report",
            "body": None,
            "body_bytes": 10,
            "content_hash": "0" * 64,
            "stored_at": 0.0,
            "evicted_reason": "capacity",
            "parent_id": None,
            "request_key": "k" if n % 2 else None,
            "reply_keys": "[]" if n % 2 else None,
        }
        for n in range(HISTORY)
    ]
    sample_rows = [
        {
            "commit_tx": 0,
            "scenario": SCENARIO,
            "id": f"s{n}",
            "kind": "trajectory",
            "body": "{}",
            "group_id": None,
            "trainer": "t",
            "origin": "named",
            "removed": False,
        }
        for n in range(HISTORY)
    ]
    job_rows = [
        {
            "scenario": SCENARIO if n % 3 else "other",
            "trainer": f"t{n % 2}",
            "job_id": f"j{n}",
            "metrics": "{}",
            "extensions": "{}",
            "trained": 1,
            "consumed": 1,
        }
        for n in range(HISTORY)
    ]
    with database.write() as connection:
        connection.execute(insert(records), rows)
        connection.execute(insert(jobs), job_rows)
        connection.execute(insert(samples), sample_rows)
        connection.execute(
            insert(pending_samples).from_select(
                ["scenario", "trainer", "commit_tx", "sample_seq"],
                select(samples.c.scenario, samples.c.trainer, samples.c.commit_tx, samples.c.seq),
            )
        )
    if database.dialect == "postgresql":
        with database.write() as connection:
            connection.execute(text("ANALYZE"))


@contextlib.contextmanager
def _sent(database: Database, table: str) -> Iterator[list[tuple[str, Any]]]:
    """The SELECT statements naming ``table`` sent while the block runs (any thread)."""
    statements: list[tuple[str, Any]] = []

    def capture(_c: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and table in statement:
            statements.append((statement, parameters))

    event.listen(database.engine, "before_cursor_execute", capture)
    try:
        yield statements
    finally:
        event.remove(database.engine, "before_cursor_execute", capture)


def _plan(database: Database, statement: str, parameters: Any) -> list[str]:
    with database.engine.connect() as connection:
        if database.dialect == "sqlite":
            rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            return [str(row[-1]) for row in rows]
        rows = connection.exec_driver_sql(f"EXPLAIN {statement}", parameters)
        return [str(row[0]).strip() for row in rows]


def _assert_seeks(
    database: Database, statements: list[tuple[str, Any]], table: str, *, sqlite_seek: str
) -> None:
    """Each statement's every access to ``table`` is an index search, one of them
    ``sqlite_seek`` on SQLite (the bound that starts at the cursor); on PostgreSQL an index
    condition on the cursor's column; nothing sorts or scans the table."""
    assert statements, f"no read of {table} was sent"
    for statement, parameters in statements:
        plan = _plan(database, statement, parameters)
        shown = "\n".join(plan)
        if database.dialect == "sqlite":
            accesses = [line for line in plan if re.search(rf"\b{table}\b", line)]
            assert accesses, shown
            assert all(line.startswith("SEARCH") for line in accesses), shown
            assert any(sqlite_seek in line for line in accesses), shown
            assert "TEMP B-TREE" not in shown, shown
        else:
            assert "Seq Scan" not in shown, shown
            assert "Sort" not in shown, shown
            conditions = [line for line in plan if line.startswith("Index Cond")]
            assert any(re.search(r"seq|ROW\(", line) for line in conditions), shown


@pytest.fixture
def database(storage_database: Database) -> Database:
    _history(storage_database)
    return storage_database


def _tail(store: RecordStore) -> Any:
    return store.read_links_after(None)[-100].position


def test_the_trainers_record_reads_seek_to_their_cursor(database: Database) -> None:
    store = RecordStore(database, SCENARIO)
    cursor = _tail(store)
    with _sent(database, "reef_records") as statements:
        assert len(store.read_after(cursor, 50)) == 50
        assert store.read_after(cursor)
    _assert_seeks(database, statements, "reef_records", sqlite_seek="commit_tx=? AND seq>?")


def test_link_entry_reads_seek_to_their_cursor(database: Database) -> None:
    """rule: P-SET-2 (the index catches up from its cursor)"""
    store = RecordStore(database, SCENARIO)
    cursor = _tail(store)
    with _sent(database, "reef_records") as statements:
        assert len(store.read_links_after(cursor, 50)) == 50
        assert len(store.read_links_after(cursor)) == 99
    _assert_seeks(database, statements, "reef_records", sqlite_seek="commit_tx=? AND seq>?")


def test_admission_after_another_writers_commit_catches_up_from_its_cursor(
    database: Database, storage_url: str
) -> None:
    """rule: P-REP-1, P-SET-2 (the ledger's catch-up inside its transaction)"""
    ledger = ScenarioLedger(RecordStore(database, SCENARIO), [])
    other = open_database(storage_url)
    try:
        ledger.append(_call("first")).result(timeout=60)
        RecordStore(other, SCENARIO).append(_call("elsewhere"), link=_entry("elsewhere"))
        with _sent(database, "reef_records") as statements:
            ledger.append(_call("after")).result(timeout=60)
    finally:
        ledger.close()
        other.dispose()
    catch_ups = [(sql, parameters) for sql, parameters in statements if "ORDER BY" in sql]
    _assert_seeks(database, catch_ups, "reef_records", sqlite_seek="commit_tx=? AND seq>?")


def test_untrained_samples_are_read_from_the_cursor(database: Database) -> None:
    """rule: P-BUF-2 (untrained samples in store order, read on from the last position)"""
    store = TrainerSamples(database, SCENARIO)
    store.register_trainer("t", reads_uploads=False)
    cursor = store.untrained("t")[-100].position
    with _sent(database, "reef_pending_samples") as statements:
        assert len(store.untrained("t", after_position=cursor, limit=50)) == 50
        assert len(store.untrained("t", after_position=cursor)) == 99
    _assert_seeks(
        database, statements, "reef_pending_samples", sqlite_seek="commit_tx=? AND sample_seq>?"
    )


def test_eviction_walks_the_held_bodies_by_index(database: Database) -> None:
    store = RecordStore(database, SCENARIO, capacity=RecordCapacity(max_bodies=1))
    with _sent(database, "reef_records") as statements:
        store.append(_call("one"), link=_entry("one"))
        store.append(_call("two"), link=_entry("two"))
    walks = [(sql, parameters) for sql, parameters in statements if "evicted_reason IS" in sql]
    _assert_seeks(database, walks, "reef_records", sqlite_seek="seq>?")


def test_the_job_history_pages_back_by_index(database: Database) -> None:
    history = JobHistory(database, SCENARIO)
    with _sent(database, "reef_jobs") as statements:
        assert len(history.read(before=2_000, limit=10)) == 10
        assert len(history.read(trainer="t1", before=2_000, limit=10)) == 10
    _assert_seeks(database, statements, "reef_jobs", sqlite_seek="seq<?")


def _call(name: str) -> InferenceRecord:
    return InferenceRecord(
        id=name,
        scenario=SCENARIO,
        request={"messages": [{"role": "user", "content": name}]},
        response={"choices": [{"message": {"role": "assistant", "content": "ok"}}]},
        artifact_id="a1",
    )


def _entry(name: str) -> LinkEntry:
    return TrajectoryIndex().add(_call(name))


@pytest.mark.parametrize(("newest_first", "seek"), [(False, "seq>?"), (True, "seq<?")])
def test_a_page_of_samples_seeks_to_its_cursor(
    database: Database, newest_first: bool, seek: str
) -> None:
    """The console's sample list and an export read a page at a time after the last one: each
    page an index range from its cursor, in either order, never the scenario from its start."""
    browser = SampleBrowser(database, SCENARIO)
    where = SampleFilter(kind="trajectory")
    first = browser.page(where, limit=1000, newest_first=newest_first)
    with _sent(database, "reef_samples") as statements:
        page = browser.page(
            where, after=first[-1].stored.position, limit=50, newest_first=newest_first
        )
    assert len(page) == 50
    order = [s.stored.position.seq for s in [*first, *page]]
    assert order == sorted(order, reverse=newest_first)
    pages = [(sql, parameters) for sql, parameters in statements if "ORDER BY" in sql]
    _assert_seeks(database, pages, "reef_samples", sqlite_seek=f"commit_tx=? AND {seek}")


def test_samples_asked_by_id_are_looked_up_by_id(database: Database) -> None:
    """A page's samples are read back by their ids: each looked up in the (scenario, id)
    index, never the scenario's samples walked in store order to find them."""
    with _sent(database, "reef_samples") as statements:
        found = TrainerSamples(database, SCENARIO).get(["s2999", "s5", "s1500"])
    assert [s.id for s in found] == ["s5", "s1500", "s2999"]  # store order
    for statement, parameters in statements:
        shown = "\n".join(_plan(database, statement, parameters))
        if database.dialect == "sqlite":
            assert "(scenario=? AND id=?)" in shown, shown
        else:
            assert "Seq Scan" not in shown, shown
            assert "id" in shown, shown
