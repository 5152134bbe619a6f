"""Linking and storing inference records: does the cost per record grow with the store?

Measures, on SQLite stores (WAL), the cost of
linking a new call into its trajectory (TrajectoryIndex.add) and storing it with its link entry
(RecordStore.append, one transaction per record) in a store that holds 1,000 calls and in one
that holds 100,000, in alternating rounds (so that noise of the shared disk falls on both), with
synchronous=FULL (the default) and NORMAL. Goal: the large store within 1.5x of the small one.

    .venv/bin/python benchmarks/bench_storage_records.py
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Iterator

from reef.core.records import InferenceRecord
from reef.core.trajectory_index import TrajectoryIndex
from reef.storage import RecordStore, open_database

SCENARIO = "bench"
CALLS_PER_TRAJECTORY = 10
MEASURED = 300
ROUNDS = 9
GOAL = 1.5


def calls(prefix: str) -> Iterator[InferenceRecord]:
    """Agent sessions of CALLS_PER_TRAJECTORY calls, each resending the conversation so far."""
    session = 0
    while True:
        messages: list[dict[str, object]] = [{"role": "system", "content": f"agent {prefix}"}]
        for turn in range(CALLS_PER_TRAJECTORY):
            messages = [*messages, {"role": "user", "content": f"{prefix}{session} asks {turn}"}]
            reply = {"role": "assistant", "content": f"answer {turn} " + "words " * 40}
            yield InferenceRecord(
                id=f"{prefix}{session}-{turn}",
                scenario=SCENARIO,
                request={"messages": messages, "temperature": 1.0},
                response={"choices": [{"message": reply, "finish_reason": "stop"}]},
                artifact_id="a0",
            )
            messages = [*messages, reply]
        session += 1


def fill(
    store: RecordStore, index: TrajectoryIndex, source: Iterator[InferenceRecord], n: int
) -> None:
    """Store ``n`` linked calls in large transactions (setting up, not measured)."""
    while n > 0:
        batch = [next(source) for _ in range(min(n, 2_000))]
        store.append_many([(call, index.add(call)) for call in batch])
        n -= len(batch)


def per_record_seconds(
    stores: list[tuple[RecordStore, TrajectoryIndex, Iterator[InferenceRecord]]],
) -> list[float]:
    """For each store, the median over ROUNDS of the mean cost of linking and storing a call.

    Rounds alternate between the stores, so that noise of the shared disk (fsync) falls on
    both measurements alike.
    """
    rounds: list[list[float]] = [[] for _ in stores]
    for _ in range(ROUNDS):
        for (store, index, source), times in zip(stores, rounds, strict=True):
            batch = [next(source) for _ in range(MEASURED)]
            started = time.perf_counter()
            for call in batch:
                store.append(call, link=index.add(call))
            times.append((time.perf_counter() - started) / MEASURED)
    return [statistics.median(times) for times in rounds]


def main() -> int:
    worst = 0.0
    with tempfile.TemporaryDirectory() as folder:
        indexes = []
        for name, stored in (("small", 1_000), ("large", 100_000)):
            database = open_database(f"sqlite:///{folder}/{name}.db", sqlite_synchronous="NORMAL")
            index = TrajectoryIndex()
            fill(RecordStore(database, SCENARIO), index, calls(name), stored)
            database.dispose()
            indexes.append((name, index))
        for synchronous in ("FULL", "NORMAL"):
            databases = [
                open_database(f"sqlite:///{folder}/{name}.db", sqlite_synchronous=synchronous)
                for name, _ in indexes
            ]
            stores = [
                (RecordStore(database, SCENARIO), index, calls(f"{name}-{synchronous}-"))
                for database, (name, index) in zip(databases, indexes, strict=True)
            ]
            counts = [len(index) for _, index in indexes]
            small, large = per_record_seconds(stores)
            for database in databases:
                database.dispose()
            ratio = large / small
            worst = max(worst, ratio)
            print(f"synchronous={synchronous}")
            print(
                f"  link + append, {counts[0]:>7,} calls stored: {small * 1e3:7.3f} ms per record"
            )
            print(
                f"  link + append, {counts[1]:>7,} calls stored: {large * 1e3:7.3f} ms per record"
            )
            print(f"  ratio {ratio:.2f} (goal <= {GOAL}): {'ok' if ratio <= GOAL else 'MISSED'}")
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
