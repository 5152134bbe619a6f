"""The record store: idempotent appends, link entries, the gap-safe cursor, eviction."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from sqlalchemy import Engine, create_engine, text

from reef.core.records import InferenceRecord, JudgedRecord, Judgment, Report
from reef.core.trajectory_index import TrajectoryIndex
from reef.storage import (
    ConflictError,
    Database,
    DropCounters,
    MissingLinkError,
    RecordCapacity,
    RecordStore,
    open_database,
)
from reef.storage.positions import lock_store_order
from reef.storage.tables import records

SCENARIO = "support"


def _conversation(length: int, *, prefix: str = "c") -> list[InferenceRecord]:
    """A trajectory of ``length`` calls, each resending the conversation so far."""
    calls = []
    messages: list[dict[str, object]] = [{"role": "system", "content": "be brief"}]
    for n in range(length):
        messages = [*messages, {"role": "user", "content": f"question {n}"}]
        reply = {"role": "assistant", "content": f"answer {n}"}
        calls.append(
            InferenceRecord(
                id=f"{prefix}{n}",
                scenario=SCENARIO,
                request={"messages": messages},
                response={"choices": [{"message": reply, "finish_reason": "stop"}]},
                artifact_id="a1",
            )
        )
        messages = [*messages, reply]
    return calls


def _store_linked(store: RecordStore, calls: list[InferenceRecord]) -> TrajectoryIndex:
    index = TrajectoryIndex()
    for call in calls:
        assert store.append(call, link=index.add(call))
    return index


def test_records_are_read_back_in_store_order_by_cursor(storage_database: Database) -> None:
    store = RecordStore(storage_database, SCENARIO)
    calls = _conversation(5)
    _store_linked(store, calls)
    report = Report(id="r1", scenario=SCENARIO, references=("c4",), score=1.0)
    judged = JudgedRecord(id="j1", scenario=SCENARIO, record_id="c2", judgment=Judgment(0.5))
    assert store.append(report)
    assert store.append(judged)

    everything = store.read_after(None)
    assert [r.id for r in everything] == ["c0", "c1", "c2", "c3", "c4", "r1", "j1"]
    assert [r.record for r in everything] == [*calls, report, judged]
    positions = [r.position for r in everything]
    assert positions == sorted(positions)

    first = store.read_after(None, limit=3)
    rest = store.read_after(first[-1].position)
    assert [r.id for r in first + rest] == [r.id for r in everything]
    assert store.read_after(everything[-1].position) == []
    assert store.get("c3") == everything[3]
    assert store.get("nope") is None


def test_an_identical_append_changes_nothing_and_a_different_one_conflicts(
    storage_database: Database,
) -> None:
    """rule: P-REP-15 (an identical retry is the same report; changed content conflicts)."""
    store = RecordStore(storage_database, SCENARIO)
    report = Report(id="r1", scenario=SCENARIO, references=("c0",), score=1.0, created_at=1.0)
    assert store.append(report)
    # A client's retry is admitted later, so only its admission time differs: same report.
    assert not store.append(
        Report(id="r1", scenario=SCENARIO, references=("c0",), score=1.0, created_at=9.0)
    )
    with pytest.raises(ConflictError, match="'r1'"):
        store.append(Report(id="r1", scenario=SCENARIO, references=("c0",), score=0.0))
    # The same id in another scenario is a conflict too: ids are unique in a deployment.
    other = RecordStore(storage_database, "other")
    with pytest.raises(ConflictError):
        other.append(Report(id="r1", scenario="other", references=("c0",), score=1.0))
    assert [r.id for r in store.read_after(None)] == ["r1"]
    assert other.read_after(None) == []


def test_a_failed_batch_stores_nothing(storage_database: Database) -> None:
    store = RecordStore(storage_database, SCENARIO)
    store.append(Report(id="r1", scenario=SCENARIO, references=("c0",), score=1.0))
    batch = [
        (Report(id="r2", scenario=SCENARIO, references=("c0",), score=1.0), None),
        (Report(id="r1", scenario=SCENARIO, references=("c0",), score=0.5), None),
    ]
    with pytest.raises(ConflictError):
        store.append_many(batch)
    assert store.get("r2") is None


def test_inference_records_need_their_own_link_entry(storage_database: Database) -> None:
    store = RecordStore(storage_database, SCENARIO)
    call = _conversation(1)[0]
    with pytest.raises(MissingLinkError):
        store.append(call)
    index = TrajectoryIndex()
    link = index.add(call)
    with pytest.raises(MissingLinkError):
        store.append(Report(id="r", scenario=SCENARIO, references=("c0",)), link=link)
    with pytest.raises(ValueError, match="scenario"):
        RecordStore(storage_database, "other").append(call, link=link)


def test_the_trajectory_index_rebuilds_from_stored_link_entries(
    storage_database: Database,
) -> None:
    """rule: P-SET-2 (links survive a restart, rebuilt in store order from link entries)."""
    store = RecordStore(storage_database, SCENARIO)
    live = _store_linked(store, _conversation(4) + _conversation(2, prefix="d"))
    rebuilt = store.trajectory_index()
    assert list(rebuilt) == list(live)
    assert rebuilt.trajectory("c3") == ("c0", "c1", "c2", "c3") == live.trajectory("c3")
    # d0 repeats c0's request: a retry of the same prefix, a sibling, never a child.
    assert rebuilt.parent("d0") is None
    assert rebuilt.parent("d1") == live.parent("d1")
    links = [r.link for r in store.read_after(None)]
    assert [link.parent_id if link else None for link in links] == [
        live.parent(call_id) for call_id in live
    ]


def test_link_entries_are_read_by_cursor_without_bodies(storage_database: Database) -> None:
    """rule: P-SET-2 (link entries, not bodies, rebuild and catch an index up)"""
    store = RecordStore(storage_database, SCENARIO, capacity=RecordCapacity(max_bodies=1))
    calls = _conversation(4)
    live = _store_linked(store, calls[:2])
    store.append(Report(id="r1", scenario=SCENARIO, references=("c1",)))
    first = store.read_links_after(None)
    assert [link.entry.call_id for link in first] == ["c0", "c1"]  # c0's body is evicted
    assert [link.entry.parent_id for link in first] == [None, "c0"]
    for call in calls[2:]:
        store.append(call, link=live.add(call))
    later = store.read_links_after(first[-1].position, limit=1)
    assert [link.entry.call_id for link in later] == ["c2"]
    assert store.read_links_after(later[0].position)[0].entry.parent_id == "c2"


def test_append_calls_links_against_what_others_stored_meanwhile(
    storage_database: Database,
) -> None:
    """rule: P-SET-2 (a writer whose index is behind catches up inside the transaction)"""
    store = RecordStore(storage_database, SCENARIO)
    calls = _conversation(3)
    behind = TrajectoryIndex()
    entries, cursor = store.append_calls(calls[:1], behind, None)
    other = TrajectoryIndex()  # another process: it stores c1 itself
    other.restore(entries[0])
    store.append(calls[1], link=other.add(calls[1]))
    entries, cursor = store.append_calls(calls[2:], behind, cursor)
    assert entries[0].parent_id == "c1"
    assert cursor == store.read_after(None)[-1].position


def test_eviction_keeps_the_newest_bodies_and_counts_what_it_lost(
    storage_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """rule: P-PIPE-18 (eviction under capacity: a warning and a durable count)."""
    database = open_database(storage_url)
    store = RecordStore(database, SCENARIO, capacity=RecordCapacity(max_bodies=3))
    calls = _conversation(5)
    with caplog.at_level(logging.WARNING, logger="reef.storage.records"):
        _store_linked(store, calls)
    assert any("evicted" in message for message in caplog.messages)
    stored = store.read_after(None)
    assert [r.evicted_reason for r in stored] == ["capacity", "capacity", None, None, None]
    assert [r.record for r in stored] == [None, None, *calls[2:]]
    # The rows and their link entries stay: trajectories still rebuild in full.
    assert store.trajectory_index().trajectory("c4") == ("c0", "c1", "c2", "c3", "c4")
    assert store.usage()[0] == 3
    # An identical retry of an evicted record is still recognised; a changed one conflicts.
    index = TrajectoryIndex()
    assert not store.append(calls[0], link=index.add(calls[0]))
    changed = InferenceRecord(id="c0", scenario=SCENARIO, request={"messages": []}, response=None)
    with pytest.raises(ConflictError):
        store.append(changed, link=TrajectoryIndex().add(changed))
    database.dispose()

    reopened = open_database(storage_url)
    assert RecordStore(reopened, SCENARIO).evictions() == {"capacity": 2}
    assert DropCounters(reopened, SCENARIO).counts() == {None: {"evicted": 2}}
    reopened.dispose()


def test_eviction_by_bytes(storage_database: Database) -> None:
    calls = _conversation(6)
    store = RecordStore(storage_database, SCENARIO)
    _store_linked(store, calls[:1])
    one_body = store.usage()[1]
    bounded = RecordStore(storage_database, "bytes", capacity=RecordCapacity(max_bytes=one_body))
    index = TrajectoryIndex()
    for call in _conversation(3):
        moved = InferenceRecord(
            id=f"b-{call.id}", scenario="bytes", request=call.request, response=call.response
        )
        bounded.append(moved, link=index.add(moved))
    count, size = bounded.usage()
    assert size <= one_body
    assert bounded.evictions() == {"capacity": 3 - count}


def test_capacity_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_bodies"):
        RecordCapacity(max_bodies=0)


@pytest.mark.postgres
def test_the_cursor_never_steps_past_a_running_transaction(storage_url: str) -> None:
    """Two real concurrent writers on PostgreSQL. The first draws the smaller sequence value and
    holds its transaction open; the second must not commit before it, or a reader would see the
    second row, move its cursor past the first, and lose the first when it commits."""
    if not storage_url.startswith("postgresql"):
        pytest.skip("sequence values can commit out of order only on PostgreSQL")
    database = open_database(storage_url)
    store = RecordStore(database, SCENARIO)
    store.append(Report(id="r0", scenario=SCENARIO, references=("c",), score=1.0))
    cursor = store.read_after(None)[-1].position

    slow_report = Report(id="slow", scenario=SCENARIO, references=("c",), score=1.0)
    fast_report = Report(id="fast", scenario=SCENARIO, references=("c",), score=1.0)
    raw = create_engine(storage_url)
    with raw.connect() as slow:
        slow_tx = slow.begin()
        # A writer in the middle of its transaction, exactly as RecordStore.append runs it.
        lock_store_order(slow, "records", SCENARIO)
        slow_seq = slow.execute(
            records.insert().values(commit_tx=0).returning(records.c.seq),
            RecordStore(database, SCENARIO)._row(slow_report, None),
        ).scalar_one()
        fast = threading.Thread(target=store.append, args=(fast_report,))
        fast.start()
        _wait_until_blocked_on_a_lock(raw)
        assert store.read_after(cursor) == []
        slow_tx.commit()
    fast.join(timeout=30)
    raw.dispose()
    after = store.read_after(cursor)
    assert [r.id for r in after] == ["slow", "fast"]
    assert after[0].position.seq == slow_seq < after[1].position.seq
    database.dispose()


def _wait_until_blocked_on_a_lock(engine: Engine) -> None:
    """Wait (polling the server, up to 30 s) until another session waits for the store lock.

    Each poll is a transaction of its own: PostgreSQL keeps one snapshot of pg_stat_activity
    for the length of a transaction.
    """
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND pid <> pg_backend_pid() AND datname = current_database()"
        " AND query LIKE '%pg_advisory_xact_lock%'"
    )
    for _ in range(3000):
        with engine.connect() as connection:
            if connection.execute(query).scalar():
                return
        time.sleep(0.01)
    raise AssertionError("the second writer never waited for the first")
