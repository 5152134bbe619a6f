"""Crash safety of add_record_samples: a writer killed with SIGKILL at random points.

rule: P-SET-16 (a unit's samples and the ids of the records it consumes are stored in one
transaction: after any crash, for every unit, both are there or neither is).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.synchronize
import os
import random
import signal
import time
from collections import Counter

import pytest
from sqlalchemy import select

from reef.storage import Database, NewSample, TrainerSamples, open_database
from reef.storage.tables import consumed_records, samples

KILLS = 40
SCENARIO = "crash"
TRAINER = "t"


def _unit_size(n: int) -> int:
    return 1 + n % 4


def _writer(url: str, run: int, ready: multiprocessing.synchronize.Event) -> None:
    """Store units of 1 to 4 samples, each consuming one record more than it has samples."""
    store = TrainerSamples(open_database(url), SCENARIO)
    ready.set()
    n = 0
    while True:
        size = _unit_size(n)
        unit = [
            NewSample(f"{TRAINER}:{run}-{n}:{i}", "trajectory", {"i": i, "pad": "x" * 300})
            for i in range(size)
        ]
        records = [f"{run}-{n}/record-{j}" for j in range(size + 1)]
        store.add_record_samples(TRAINER, unit, records)
        n += 1


@pytest.mark.slow
def test_a_killed_writer_leaves_every_unit_whole_or_absent(storage_url: str) -> None:
    database = open_database(storage_url)
    context = multiprocessing.get_context("fork")
    rng = random.Random(20261129)
    for run in range(KILLS):
        ready = context.Event()
        writer = context.Process(target=_writer, args=(storage_url, run, ready), daemon=True)
        writer.start()
        assert ready.wait(timeout=60), "the writer did not open the database"
        # The kill lands at a random point: the delay is the randomness, not a wait for work.
        time.sleep(rng.uniform(0.0, 0.15))
        assert writer.pid is not None
        os.kill(writer.pid, signal.SIGKILL)
        writer.join(timeout=30)
        assert writer.exitcode == -signal.SIGKILL
        units = _check_units(database)
    database.dispose()
    assert units > KILLS, "the writers stored too little for the test to mean anything"


def _check_units(database: Database) -> int:
    """Every unit stored is whole: all its samples and all its consumed records.

    Both are read in one snapshot: on PostgreSQL the killed writer's last COMMIT may still be
    landing on the server while the check runs, and two separate reads could straddle it.
    """
    with database.engine.connect() as connection:
        if database.dialect == "postgresql":
            connection = connection.execution_options(isolation_level="REPEATABLE READ")
        with connection.begin():
            sample_ids = connection.execute(
                select(samples.c.id).where(samples.c.scenario == SCENARIO)
            ).scalars()
            samples_by_unit = Counter(i.split(":")[1] for i in sample_ids)
            record_ids = connection.execute(
                select(consumed_records.c.record_id).where(
                    consumed_records.c.scenario == SCENARIO, consumed_records.c.trainer == TRAINER
                )
            ).scalars()
            consumed_by_unit = Counter(r.split("/")[0] for r in record_ids)
    units = set(samples_by_unit) | set(consumed_by_unit)
    for unit in sorted(units):
        size = _unit_size(int(unit.split("-")[1]))
        assert (samples_by_unit[unit], consumed_by_unit[unit]) == (size, size + 1), unit
    return len(units)
