"""Filling a sample store in bulk, for the pipeline benchmarks' setting up (never measured).

Core inserts of many sample rows at once, each followed by one row per sample in a table beside
``reef_samples`` (a trainer's untrained entry, or its train count): far quicker than the store's
own one-transaction-per-unit path, which the benchmarks do not mean to measure here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Table

from reef.storage.database import Database
from reef.storage.tables import samples

#: Rows per transaction.
BATCH = 20_000


def insert_samples(
    database: Database,
    n: int,
    *,
    scenario: str,
    trainer: str,
    id_prefix: str,
    body: str,
    commit_tx: int,
    beside: Table,
    beside_row: Callable[[int], dict[str, Any]],
) -> None:
    """Store ``n`` samples of ``trainer`` made from records, named ``<id_prefix>-<i>``, all with
    the stored JSON ``body``; for each, insert ``beside_row(seq)`` into the table ``beside``."""
    done = 0
    while done < n:
        size = min(BATCH, n - done)
        rows = [
            {
                "commit_tx": commit_tx,
                "scenario": scenario,
                "id": f"{id_prefix}-{done + i}",
                "kind": "trajectory",
                "body": body,
                "group_id": None,
                "trainer": trainer,
                "origin": "record",
                "removed": False,
            }
            for i in range(size)
        ]
        with database.write() as connection:
            seqs = (
                connection.execute(
                    samples.insert().returning(samples.c.seq, sort_by_parameter_order=True), rows
                )
                .scalars()
                .all()
            )
            connection.execute(beside.insert(), [beside_row(seq) for seq in seqs])
        done += size
