"""The scenario ledger: group commit, refusals inside a batch, and several processes on one store.

Admissions that wait together (inference records and reports) share one transaction; a
refused one takes nothing and its neighbours are stored and answered as if it were not there;
a write conflict that only the insert finds sends the batch back one item at a time.

Each ``reef serve`` process has its own ledger per scenario, with its own trajectory index.
Two ledgers on separate :class:`~reef.storage.Database` objects (two processes, as far as the
store can tell) link calls of the same conversations at the same time. Whatever the
interleaving, every stored link entry must equal the one a single index makes when it links
the stored calls in store order (P-SET-2): a call never misses a parent that was committed
before it.
"""

from __future__ import annotations

import concurrent.futures
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

# The server extra (reef-core[server]); without it reef-core's own tests skip this module.
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from sqlalchemy import create_engine, event, func, select

from reef.core.records import InferenceRecord, Report
from reef.core.trajectory_index import LinkEntry, TrajectoryIndex
from reef.server.errors import ApiError, ReportRejected
from reef.server.ledger import ScenarioLedger
from reef.storage import ConflictError, Database, RecordStore, open_database

SCENARIO = "links"


def _conversations(
    count: int, length: int, prefix: str = "c", scenario: str = SCENARIO
) -> list[list[InferenceRecord]]:
    """``count`` conversations of ``length`` calls, each call resending the one before."""
    conversations = []
    for c in range(count):
        messages: list[dict[str, object]] = [{"role": "system", "content": f"agent {prefix}{c}"}]
        calls = []
        for n in range(length):
            messages = [*messages, {"role": "user", "content": f"question {n}"}]
            reply = {"role": "assistant", "content": f"answer {n}"}
            calls.append(
                InferenceRecord(
                    id=f"{prefix}{c}-{n}",
                    scenario=scenario,
                    request={"messages": messages},
                    response={"choices": [{"message": reply, "finish_reason": "stop"}]},
                )
            )
            messages = [*messages, reply]
        conversations.append(calls)
    return conversations


def test_two_ledgers_on_one_store_link_as_one_writer_in_store_order(storage_url: str) -> None:
    """rule: P-SET-2"""
    databases = [open_database(storage_url), open_database(storage_url)]
    ledgers = [ScenarioLedger(RecordStore(d, SCENARIO), []) for d in databases]
    try:
        conversations = _conversations(count=6, length=40)
        rng = random.Random(7)
        futures: list[concurrent.futures.Future[object]] = []
        # Every call goes out at once, each to either ledger: the next call of a conversation
        # often reaches one ledger while the other is committing its parent.
        for step in range(40):
            for calls in conversations:
                futures.append(ledgers[rng.randrange(2)].append(calls[step]))  # type: ignore[arg-type]
        for future in futures:
            future.result(timeout=120)
        stored = RecordStore(databases[0], SCENARIO).read_after(None)
        replay = TrajectoryIndex()
        mismatches = []
        for row in stored:
            assert row.record is not None
            assert isinstance(row.record, InferenceRecord)
            expected = replay.add(row.record)
            if row.link != expected:
                mismatches.append((row.id, row.link and row.link.parent_id, expected.parent_id))
        assert len(stored) == 6 * 40
        assert mismatches == []
    finally:
        for ledger in ledgers:
            ledger.close()
        for database in databases:
            database.dispose()


def test_a_ledger_links_to_a_parent_another_writer_stored_between_its_batches(
    storage_url: str,
) -> None:
    """The ledger skips its catch-up only while nobody else commits: a parent stored by another
    connection of the same process (or another process) between two batches is found
    (P-SET-2), and with the ledger as the only writer no catch-up query runs at all."""
    database = open_database(storage_url)
    ledger = ScenarioLedger(RecordStore(database, SCENARIO), [])
    catch_ups: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if "ORDER BY" in statement and "commit_tx" in statement:
            catch_ups.append(statement)

    event.listen(database.engine, "before_cursor_execute", count)
    try:
        first, second, third = _conversations(count=1, length=3)[0]
        ledger.append(first).result(timeout=60)
        ledger.append(_conversations(count=1, length=1, prefix="quiet")[0][0]).result(timeout=60)
        quiet = len(catch_ups)
        # Another writer (its own index, a pooled connection) stores the second call.
        other = RecordStore(database, SCENARIO)
        other.append_calls([second], other.trajectory_index(), None)
        linked = ledger.append(third).result(timeout=60)
    finally:
        event.remove(database.engine, "before_cursor_execute", count)
        ledger.close()
        database.dispose()
    assert linked.parent_id == second.id
    if database.dialect == "sqlite":
        assert quiet == 1  # the ledger's first batch, on its new connection; then none


def test_a_ledger_whose_connection_was_dropped_writes_its_next_batch_on_a_new_one(
    storage_url: str,
) -> None:
    """The ledger keeps one connection; when the database dropped it between two batches (a
    restart), the next batch is written on a fresh connection instead of failing."""
    database = open_database(storage_url)
    if database.dialect != "postgresql":
        database.dispose()
        pytest.skip("a SQLite file has no server to drop the connection")
    backends: set[int] = set()

    def checked_out(raw: Any, *_: Any) -> None:
        backends.add(raw.info.backend_pid)

    event.listen(database.engine, "checkout", checked_out)
    ledger = ScenarioLedger(RecordStore(database, SCENARIO), [])
    other = create_engine(storage_url)
    try:
        first, second = _conversations(count=1, length=2)[0]
        ledger.append(first).result(timeout=60)
        with other.connect() as admin:
            for backend in backends:  # the ledger's held connection among them
                admin.execute(select(func.pg_terminate_backend(backend)))
        linked = ledger.append(second).result(timeout=60)
    finally:
        ledger.close()
        other.dispose()
        database.dispose()
    assert linked.parent_id == first.id


class _HeldCommits:
    """Counts a database's commits and holds the first one until released: what is queued
    meanwhile reaches the ledger together, as concurrent requests do."""

    def __init__(self, database: Database) -> None:
        self.count = 0
        self.holding = threading.Event()
        self.release = threading.Event()
        event.listen(database.engine, "commit", self._commit)
        self._engine = database.engine

    def _commit(self, _connection: Any) -> None:
        self.count += 1
        if self.count == 1:
            self.holding.set()
            assert self.release.wait(timeout=60)

    def remove(self) -> None:
        self.release.set()
        event.remove(self._engine, "commit", self._commit)


@pytest.fixture
def ledger(storage_url: str) -> Iterator[tuple[ScenarioLedger, Database]]:
    database = open_database(storage_url)
    ledger = ScenarioLedger(RecordStore(database, SCENARIO), [])
    try:
        yield ledger, database
    finally:
        ledger.close()
        database.dispose()


def _outcome(future: concurrent.futures.Future[Any]) -> object:
    try:
        return future.result(timeout=60)
    except Exception as exc:
        return exc


def test_concurrent_admissions_share_one_commit_and_refusals_spare_their_neighbours(
    ledger: tuple[ScenarioLedger, Database],
) -> None:
    """rule: P-REP-1, P-REP-2 (each report judged as if admitted alone, in arrival order)"""
    writer, database = ledger
    (a,) = _conversations(1, 1, prefix="a")[0]
    b1, b2 = _conversations(1, 2, prefix="b")[0]
    (stray,) = _conversations(1, 1, prefix="s", scenario="elsewhere")[0]
    commits = _HeldCommits(database)
    try:
        first = writer.append(a)
        assert commits.holding.wait(timeout=60)  # the ledger is inside a's commit
        queued = {
            "b1": writer.append(b1),
            "b2": writer.append(b2),  # continues b1, taken in the same batch
            "good": writer.admit(Report("r-good", SCENARIO, (b2.id,))),
            "inner": writer.admit(Report("r-inner", SCENARIO, (b1.id,))),
            "missing": writer.admit(Report("r-missing", SCENARIO, ("nowhere",))),
            "on-a": writer.admit(Report("r-a", SCENARIO, (a.id,))),
            "retry": writer.admit(Report("r-good", SCENARIO, (b2.id,))),
            "other-content": writer.admit(Report("r-good", SCENARIO, (a.id,), score=1.0)),
            "call-id": writer.admit(Report(b1.id, SCENARIO, (a.id,))),
            "stray": writer.append(stray),
        }
        commits.release.set()
        first.result(timeout=60)
        got = {name: _outcome(future) for name, future in queued.items()}
    finally:
        commits.remove()
    # a's commit, then one for everything queued while it was held.
    assert commits.count == 2
    assert isinstance(got["b2"], LinkEntry)
    assert got["b2"].parent_id == b1.id  # linked to b1, taken earlier in the same batch
    assert got["good"][1] is True  # type: ignore[index]
    assert got["on-a"][1] is True  # type: ignore[index]
    assert got["retry"] == (got["good"][0], False)  # type: ignore[index]
    reasons = {
        name: outcome.reason if isinstance(outcome, ReportRejected) else type(outcome)
        for name, outcome in got.items()
        if isinstance(outcome, Exception)
    }
    assert reasons == {
        "inner": "inner",
        "missing": "missing",
        "other-content": ApiError,
        "call-id": ApiError,
        "stray": ValueError,
    }
    assert [got["other-content"].status, got["call-id"].status] == [409, 409]  # type: ignore[union-attr]
    stored = RecordStore(database, SCENARIO).read_after(None)
    assert [row.id for row in stored] == [a.id, b1.id, b2.id, "r-good", "r-a"]


def _one_batch(
    writer: ScenarioLedger,
    database: Database,
    listener: Callable[..., None],
    calls: list[InferenceRecord],
) -> list[object]:
    """Queue ``calls`` while the ledger is inside the commit of a "held0-0" call, so they reach
    it as one batch, with ``listener`` on the database's statements; their outcomes."""
    commits = _HeldCommits(database)
    try:
        held = writer.append(_conversations(1, 1, prefix="held")[0][0])
        assert commits.holding.wait(timeout=60)
        event.listen(database.engine, "before_cursor_execute", listener)
        futures = [writer.append(call) for call in calls]
        commits.release.set()
        held.result(timeout=60)
        return [_outcome(future) for future in futures]
    finally:
        commits.remove()
        event.remove(database.engine, "before_cursor_execute", listener)


def test_a_conflict_only_the_insert_finds_is_written_again_item_by_item(
    ledger: tuple[ScenarioLedger, Database], storage_url: str
) -> None:
    """Another scenario takes an id between the batch's look-up and its insert: the batch
    falls back to one transaction per item, and only that item is refused."""
    if storage_url.startswith("sqlite"):
        pytest.skip("SQLite serialises every writer: no one can take an id inside the batch")
    writer, database = ledger
    calls = _conversations(3, 1, prefix="x")
    (taken,) = _conversations(1, 1, prefix="x", scenario="elsewhere")[0]  # id "x0-0"
    intruder = open_database(storage_url)
    raced = threading.Event()

    def take_the_id(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        if statement.startswith("INSERT INTO reef_records") and not raced.is_set():
            raced.set()
            RecordStore(intruder, "elsewhere").append(taken, link=TrajectoryIndex().add(taken))

    try:
        outcomes = _one_batch(
            writer, database, take_the_id, [conversation[0] for conversation in calls]
        )
    finally:
        intruder.dispose()
    assert raced.is_set()
    assert isinstance(outcomes[0], ConflictError)
    assert [entry.call_id for entry in outcomes[1:]] == ["x1-0", "x2-0"]  # type: ignore[union-attr]
    stored = [row.id for row in RecordStore(database, SCENARIO).read_after(None)]
    assert stored == ["held0-0", "x1-0", "x2-0"]


class _Poisoned(Exception):
    pass


def test_a_failed_batch_falls_back_item_by_item_without_rebuilding_the_index(
    ledger: tuple[ScenarioLedger, Database],
) -> None:
    """rule: P-SET-2. A batch whose transaction fails is written again one item at a time; the
    index drops only what the failed transactions added (no read of the store's link entries
    from the start, however many items fail), and calls of the batch still link to each other
    and to what came before."""
    writer, database = ledger
    a1, a2, a3 = _conversations(1, 3, prefix="a")[0]
    (poison,) = _conversations(1, 1, prefix="poison")[0]
    full_reads: list[str] = []

    def fail_and_watch(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if statement.startswith("INSERT INTO reef_records") and poison.id in str(parameters):
            raise _Poisoned(poison.id)
        if "reef_records" in statement and "ORDER BY" in statement and "-1" in str(parameters):
            full_reads.append(statement)

    writer.append(a1).result(timeout=60)
    outcomes = _one_batch(writer, database, fail_and_watch, [a2, poison, a3])
    assert isinstance(outcomes[1], _Poisoned)
    assert [outcomes[0].parent_id, outcomes[2].parent_id] == [a1.id, a2.id]  # type: ignore[union-attr]
    assert full_reads == []
    (a4,) = _conversations(1, 4, prefix="a")[0][3:]
    assert writer.append(a4).result(timeout=60).parent_id == a3.id
    stored = [row.id for row in RecordStore(database, SCENARIO).read_after(None)]
    assert stored == [a1.id, "held0-0", a2.id, a3.id, a4.id]
    assert writer.append(poison).result(timeout=60).parent_id is None  # never half-linked
