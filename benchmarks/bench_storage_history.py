"""Costs that must not grow with history: reads from a cursor, admission, the ledger's start.

For stores that hold 10,000 and 100,000 inference records (and 1,000,000 with ``--million``),
on SQLite and, when ``REEF_TEST_DATABASE_URL`` names one, PostgreSQL, measures in one run:

- ``read_after``: the trainer's read of the next 500 records from a cursor 600 records before
  the end (per call);
- ``read_links_after``: the same read of link entries (per call);
- idle poll: ``read_after`` from the last position, nothing new (what an idle trainer does
  every 0.2 s);
- admission after another connection's commit: a ledger appends a call right after another
  connection stored one (that write outside the clock), so its catch-up query runs (per call,
  its commit included);
- start: a ledger's start (it reads every link entry and rebuilds the trajectory index).

Each per-call figure is the median of ROUNDS rounds of REPEAT calls (the spread printed is the
lowest and highest round); the rounds alternate between the stores, and the ratios are against
the 10,000-record store measured in the same run.
Goal: every per-call and per-poll cost within 1.5x of its cost at 10,000. The start is printed
with its ratio and is not part of the goal: it reads every link entry, so it grows with history.

    .venv/bin/python benchmarks/bench_storage_history.py [--million]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

from sqlalchemy import insert

from reef.core.records import InferenceRecord
from reef.core.trajectory_index import TrajectoryIndex
from reef.server.ledger import ScenarioLedger
from reef.storage import Database, RecordStore, open_database
from reef.storage.tables import records
from reef.testing.storage import postgres_schema_url

SCENARIO = "bench"
ROUNDS = 7
REPEAT = 20
GOAL = 1.5
PAGE = 500


def fill(database: Database, n: int) -> None:
    """``n`` stored inference calls (bodies evicted, link entries kept), and as many rows of
    another scenario interleaved, written as rows (setting up, not measured)."""
    chunk = 20_000
    for start in range(0, n, chunk):
        rows = [
            {
                "commit_tx": 0,
                "scenario": SCENARIO if i % 2 else "other",
                "id": f"h{i}",
                "kind": "inference",
                "body": None,
                "body_bytes": 100,
                "content_hash": "0" * 64,
                "stored_at": 0.0,
                "evicted_reason": "capacity",
                "parent_id": None,
                "request_key": f"{i:032x}",
                "reply_keys": f'["{i + 1:032x}"]',
            }
            for i in range(2 * start, 2 * min(start + chunk, n))
        ]
        with database.write() as connection:
            connection.execute(insert(records), rows)
    if database.dialect == "postgresql":
        with database.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
            c.exec_driver_sql("ANALYZE")


def calls(prefix: str) -> Iterator[InferenceRecord]:
    n = 0
    while True:
        yield InferenceRecord(
            id=f"{prefix}{n}",
            scenario=SCENARIO,
            request={"messages": [{"role": "user", "content": f"{prefix} {n}"}]},
            response={"choices": [{"message": {"role": "assistant", "content": "ok"}}]},
        )
        n += 1


Work = tuple[Callable[[], object], Callable[[], object] | None]


def timed(work: Work) -> float:
    """Seconds per call of REPEAT calls of ``work`` (its setup, if any, outside the clock)."""
    call, before = work
    spent = 0.0
    for _ in range(REPEAT):
        if before is not None:
            before()
        started = time.perf_counter()
        call()
        spent += time.perf_counter() - started
    return spent / REPEAT


@contextlib.contextmanager
def prepared(url: str, n: int) -> Iterator[tuple[dict[str, Work], float]]:
    """A store of ``n`` records, the measured operations on it, and its ledger's start time."""
    database = open_database(url, sqlite_synchronous="NORMAL")
    other = open_database(url, sqlite_synchronous="NORMAL")
    try:
        fill(database, n)
        store = RecordStore(database, SCENARIO)
        tail = store.read_links_after(None)
        cursor = tail[-600].position
        started = time.perf_counter()
        ledger = ScenarioLedger(store, [])
        start = time.perf_counter() - started
        try:
            others = RecordStore(other, SCENARIO)
            mine, theirs = calls("mine"), calls("theirs")
            empty = TrajectoryIndex()

            def another_commit() -> None:
                call = next(theirs)
                others.append(call, link=empty.add(call))

            def end_cursor() -> None:
                # The idle trainer's cursor is the last record (admissions add some meanwhile).
                ends[0] = store.read_after(cursor)[-1].position

            ends = [cursor]
            works: dict[str, Work] = {
                "read_after(cursor, 500)": (lambda: store.read_after(cursor, PAGE), None),
                "read_links_after(cursor, 500)": (
                    lambda: store.read_links_after(cursor, PAGE),
                    None,
                ),
                "idle poll": (lambda: store.read_after(ends[0], PAGE), end_cursor),
                "admission after another commit": (
                    lambda: ledger.append(next(mine)).result(timeout=60),
                    another_commit,
                ),
            }
            yield works, start
        finally:
            ledger.close()
    finally:
        other.dispose()
        database.dispose()


def measure(urls: list[str], sizes: list[int]) -> list[dict[str, list[float]]]:
    """Each operation's seconds per call in each of ROUNDS rounds, per size; the rounds
    alternate between the sizes, so that the shared machine's noise falls on all alike."""
    with contextlib.ExitStack() as stack:
        stores = [stack.enter_context(prepared(url, n)) for url, n in zip(urls, sizes, strict=True)]
        figures: list[dict[str, list[float]]] = [
            {name: [] for name in works} | {"ledger start (s, once)": [start]}
            for works, start in stores
        ]
        for _ in range(ROUNDS):
            for (works, _start), result in zip(stores, figures, strict=True):
                for name, work in works.items():
                    result[name].append(timed(work))
    return figures


def report(dialect: str, sizes: list[int], figures: list[dict[str, list[float]]]) -> float:
    print(f"\n{dialect}: median ms per call [lowest, highest round]; ratio vs {sizes[0]:,}")
    worst = 0.0
    for name in figures[0]:
        base = statistics.median(figures[0][name])
        cells = []
        for size, result in zip(sizes, figures, strict=True):
            value = statistics.median(result[name])
            ratio = value / base
            scale = 1.0 if name.startswith("ledger start") else 1e3
            spread = f"[{min(result[name]) * scale:.2f}, {max(result[name]) * scale:.2f}]"
            cells.append(f"{size:>9,}: {value * scale:8.2f} {spread} x{ratio:.2f}")
            if not name.startswith("ledger start"):
                worst = max(worst, ratio)
        print(f"  {name}")
        for cell in cells:
            print(f"    {cell}")
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--million", action="store_true", help="also a 1,000,000-record store")
    sizes = [10_000, 100_000] + ([1_000_000] if parser.parse_args().million else [])
    print(f"{ROUNDS} rounds of {REPEAT} calls; stores of {', '.join(f'{n:,}' for n in sizes)}")
    worst = 0.0
    with tempfile.TemporaryDirectory() as folder:
        figures = measure([f"sqlite:///{folder}/s{n}.db" for n in sizes], sizes)
        worst = max(worst, report("sqlite", sizes, figures))
    base = os.environ.get("REEF_TEST_DATABASE_URL")
    if base:
        with contextlib.ExitStack() as schemas:
            urls = [schemas.enter_context(postgres_schema_url(base)) for _ in sizes]
            worst = max(worst, report("postgresql", sizes, measure(urls, sizes)))
    else:
        print("\npostgresql: skipped (REEF_TEST_DATABASE_URL names no database)")
    verdict = "ok" if worst <= GOAL else "MISSED"
    print(f"\nworst per-call ratio {worst:.2f} (goal <= {GOAL}): {verdict}")
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
