"""The record store: idempotent appends, link entries, the gap-safe cursor, eviction."""

from __future__ import annotations

import logging

import pytest
from sqlalchemy import create_engine, text

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

pytest_plugins = ("reef.testing.storage",)

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
    """Two real concurrent transactions on PostgreSQL: the first takes the smaller sequence
    number but commits last. A reader must not return the second's row before the first's
    commits, or its cursor would step past the first row for ever."""
    if not storage_url.startswith("postgresql"):
        pytest.skip("sequence values commit out of order only on PostgreSQL")
    database = open_database(storage_url)
    store = RecordStore(database, SCENARIO)
    store.append(Report(id="r0", scenario=SCENARIO, references=("c",), score=1.0))
    seen = store.read_after(None)
    cursor = seen[-1].position

    raw = create_engine(storage_url)
    insert = text(
        "INSERT INTO reef_records (commit_tx, scenario, id, kind, body, body_bytes,"
        " content_hash, stored_at) VALUES (pg_current_xact_id()::text::bigint, :scenario,"
        " :id, 'report', :body, 1, :id, 0) RETURNING seq"
    )
    body = '{{"kind":"report","id":"{id}","scenario":"support","references":["c"],"score":1.0,'
    body += '"feedback":null,"metadata":{{}},"created_at":0.0}}'
    with raw.connect() as slow, raw.connect() as fast:
        slow_tx = slow.begin()
        slow_seq = slow.execute(
            insert, {"scenario": SCENARIO, "id": "slow", "body": body.format(id="slow")}
        ).scalar()
        with fast.begin():
            fast_seq = fast.execute(
                insert, {"scenario": SCENARIO, "id": "fast", "body": body.format(id="fast")}
            ).scalar()
        assert slow_seq < fast_seq
        # "fast" is committed, but "slow" may still commit before it in sequence order.
        assert store.read_after(cursor) == []
        slow_tx.commit()
    raw.dispose()
    after = store.read_after(cursor)
    assert sorted(r.id for r in after) == ["fast", "slow"]
    assert store.read_after(after[-1].position) == []
    database.dispose()
