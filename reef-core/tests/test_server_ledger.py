"""Scenario ledgers of several processes on one store: links stay what one writer would make.

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

from reef.core.records import InferenceRecord
from reef.core.trajectory_index import TrajectoryIndex
from reef.server.ledger import ScenarioLedger
from reef.storage import RecordStore, open_database

pytest_plugins = ("reef.testing.storage",)

SCENARIO = "links"


def _conversations(count: int, length: int) -> list[list[InferenceRecord]]:
    """``count`` conversations of ``length`` calls, each call resending the one before."""
    conversations = []
    for c in range(count):
        messages: list[dict[str, object]] = [{"role": "system", "content": f"agent {c}"}]
        calls = []
        for n in range(length):
            messages = [*messages, {"role": "user", "content": f"question {n}"}]
            reply = {"role": "assistant", "content": f"answer {n}"}
            calls.append(
                InferenceRecord(
                    id=f"c{c}-{n}",
                    scenario=SCENARIO,
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
