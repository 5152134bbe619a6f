"""Storing units of samples: TrainerSamples against the standard library's sqlite3.

Both store the same units (4 samples of ~1 KB each, 5 consumed record ids) into the same
schema, one transaction per unit, with the same settings: WAL, foreign keys, BEGIN IMMEDIATE,
and synchronous=FULL (Reef's default), then NORMAL (where the disk no longer hides the CPU
cost). sqlite3 writes exactly the rows TrainerSamples writes (samples, the trainer's untrained
entries, consumed records). Goal: TrainerSamples at least 50% of sqlite3's throughput. The
figure with one transaction for everything is printed as the ceiling.

    .venv/bin/python benchmarks/bench_storage_samples.py
"""

from __future__ import annotations

import json
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

from reef.storage import NewSample, TrainerSamples, open_database
from reef.storage.database import SqliteSynchronous

UNITS = 400
SAMPLES_PER_UNIT = 4
ROUNDS = 5
GOAL = 0.5
TRAINER = "t"
SCENARIO = "bench"


def unit(n: int, tag: str) -> tuple[list[NewSample], list[str]]:
    samples = [
        NewSample(f"{TRAINER}:{tag}-{n}:{i}", "trajectory", {"i": i, "text": "token " * 170})
        for i in range(SAMPLES_PER_UNIT)
    ]
    return samples, [f"{tag}-{n}/r{j}" for j in range(SAMPLES_PER_UNIT + 1)]


def reef_units(folder: str, tag: str, synchronous: SqliteSynchronous) -> float:
    database = open_database(f"sqlite:///{folder}/reef-{tag}.db", sqlite_synchronous=synchronous)
    store = TrainerSamples(database, SCENARIO)
    units = [unit(n, tag) for n in range(UNITS)]
    started = time.perf_counter()
    for samples, records in units:
        store.add_record_samples(TRAINER, samples, records)
    elapsed = time.perf_counter() - started
    database.dispose()
    return UNITS / elapsed


def _sqlite3_connection(
    folder: str, tag: str, synchronous: SqliteSynchronous
) -> sqlite3.Connection:
    # The same schema as Reef's (made by its migrations), written without SQLAlchemy.
    open_database(f"sqlite:///{folder}/raw-{tag}.db").dispose()
    connection = sqlite3.connect(f"{folder}/raw-{tag}.db", isolation_level=None)
    for pragma in ("busy_timeout = 30000", "journal_mode = WAL", f"synchronous = {synchronous}"):
        connection.execute(f"PRAGMA {pragma}")
    connection.execute("PRAGMA foreign_keys = ON")
    return connection


def _write_unit(
    connection: sqlite3.Connection, samples: list[NewSample], records: list[str]
) -> None:
    group = samples[0].id
    seqs = [
        connection.execute(
            "INSERT INTO reef_samples (commit_tx, scenario, id, kind, body, group_id, trainer,"
            " origin, removed) VALUES (0, ?, ?, ?, ?, ?, ?, 'record', 0) RETURNING seq",
            (
                SCENARIO,
                s.id,
                s.kind,
                json.dumps(s.body, sort_keys=True, separators=(",", ":")),
                group,
                TRAINER,
            ),
        ).fetchone()[0]
        for s in samples
    ]
    connection.executemany(
        "INSERT INTO reef_pending_samples (scenario, trainer, commit_tx, sample_seq)"
        " VALUES (?, ?, 0, ?)",
        [(SCENARIO, TRAINER, seq) for seq in seqs],
    )
    connection.executemany(
        "INSERT OR IGNORE INTO reef_consumed_records (scenario, trainer, record_id)"
        " VALUES (?, ?, ?)",
        [(SCENARIO, TRAINER, record) for record in records],
    )


def sqlite3_units(
    folder: str, tag: str, synchronous: SqliteSynchronous, *, one_transaction: bool
) -> float:
    connection = _sqlite3_connection(folder, tag, synchronous)
    units = [unit(n, tag) for n in range(UNITS)]
    started = time.perf_counter()
    if one_transaction:
        connection.execute("BEGIN IMMEDIATE")
    for samples, records in units:
        if not one_transaction:
            connection.execute("BEGIN IMMEDIATE")
        _write_unit(connection, samples, records)
        if not one_transaction:
            connection.execute("COMMIT")
    if one_transaction:
        connection.execute("COMMIT")
    elapsed = time.perf_counter() - started
    connection.close()
    return UNITS / elapsed


def compare(folder: str, synchronous: SqliteSynchronous) -> float:
    """Print the three figures with ``synchronous``; return TrainerSamples' ratio to sqlite3."""
    runs: dict[str, list[float]] = {"reef": [], "sqlite3": [], "ceiling": []}
    measure: dict[str, Callable[[str], float]] = {
        "reef": lambda tag: reef_units(folder, tag, synchronous),
        "sqlite3": lambda tag: sqlite3_units(folder, tag, synchronous, one_transaction=False),
        "ceiling": lambda tag: sqlite3_units(folder, tag, synchronous, one_transaction=True),
    }
    # Alternate the contenders round by round, so that disk noise falls on each alike.
    for round_ in range(ROUNDS):
        for name, run in measure.items():
            runs[name].append(run(f"{synchronous}-{name}{round_}"))
    reef, raw, ceiling = (statistics.median(runs[name]) for name in ("reef", "sqlite3", "ceiling"))
    ratio = reef / raw
    print(f"synchronous={synchronous}, median of {ROUNDS} rounds of {UNITS} units")
    print(f"  TrainerSamples.add_record_samples, a transaction per unit: {reef:8.0f} units/s")
    print(f"  sqlite3, same rows, a transaction per unit:                {raw:8.0f} units/s")
    print(f"  sqlite3, same rows, one transaction for all (ceiling):     {ceiling:8.0f} units/s")
    print(f"  ratio {ratio:.2f} of sqlite3 (goal >= {GOAL}): {'ok' if ratio >= GOAL else 'MISSED'}")
    return ratio


def main() -> int:
    print(f"units of {SAMPLES_PER_UNIT} samples + {SAMPLES_PER_UNIT + 1} consumed records, WAL")
    with tempfile.TemporaryDirectory() as folder:
        ratios = [compare(folder, synchronous) for synchronous in ("FULL", "NORMAL")]
    return 0 if min(ratios) >= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
