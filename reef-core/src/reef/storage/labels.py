"""A person's reward for a sample, kept as an audit trail.

A label replaces the reward a trajectory sample trains with, from the next job that takes it
on: the trainer reads the labels in force for the samples of each job it builds
(:meth:`SampleLabels.in_force`), so a label given while the sample waits in a buffer counts. A
label is never edited: each is a new row saying who gave it, when, the reward it sets (``None``
takes the label back: the sample trains with its own reward again), the reward in force before
it and an optional note. The newest row of a sample is the one in force. The sample's stored
body is never changed, so the report or upload it came from stays as it was.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import attrs
from sqlalchemy import BigInteger, Column, Float, Index, Integer, String, Table, Text, func, select

from reef.storage.database import Database
from reef.storage.tables import metadata

__all__ = ["SampleLabel", "SampleLabels", "sample_labels"]

sample_labels = Table(
    "reef_sample_labels",
    metadata,
    Column("seq", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True),
    Column("scenario", String(400), nullable=False),
    Column("sample_id", String(400), nullable=False),
    # NULL: the label taken back (the sample's own reward counts again).
    Column("reward", Float, nullable=True),
    Column("previous_reward", Float, nullable=True),
    Column("labelled_by", String(400), nullable=False),
    Column("note", Text, nullable=True),
    Column("labelled_at", Float, nullable=False),
    Index(None, "scenario", "sample_id", "seq"),
    sqlite_autoincrement=True,
    comment="Rewards people gave samples, newest in force: who, when, from what, to what.",
)


@attrs.frozen
class SampleLabel:
    """One labelling of a sample.

    :ivar reward: the reward it sets; ``None`` when it takes the sample's label back.
    :ivar previous_reward: the reward in force before it (a label's, or the sample's own).
    :ivar labelled_by: who: the name of the token that asked.
    :ivar note: why, in the person's words.
    :ivar labelled_at: when (Unix seconds).
    """

    sample_id: str
    reward: float | None
    previous_reward: float | None
    labelled_by: str
    note: str | None
    labelled_at: float

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


class SampleLabels:
    """The labels of one scenario's samples."""

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario

    def label(
        self,
        sample_id: str,
        reward: float | None,
        *,
        previous_reward: float | None,
        labelled_by: str,
        note: str | None = None,
    ) -> SampleLabel:
        """Keep a new label of ``sample_id`` (the caller checked that the sample is stored)."""
        label = SampleLabel(sample_id, reward, previous_reward, labelled_by, note, time.time())
        with self._database.write() as connection:
            connection.execute(
                sample_labels.insert().values(scenario=self.scenario, **label.to_json())
            )
        return label

    def history(self, sample_id: str) -> list[SampleLabel]:
        """Every label of ``sample_id``, oldest first."""
        table = sample_labels.c
        query = (
            select(sample_labels)
            .where(table.scenario == self.scenario, table.sample_id == sample_id)
            .order_by(table.seq)
        )
        with self._database.read() as connection:
            rows = list(connection.execute(query).mappings())
        return [
            SampleLabel(
                row["sample_id"],
                row["reward"],
                row["previous_reward"],
                row["labelled_by"],
                row["note"],
                row["labelled_at"],
            )
            for row in rows
        ]

    def in_force(self, sample_ids: Sequence[str]) -> dict[str, float]:
        """The reward each of ``sample_ids`` is labelled with now (samples without a label, or
        whose label was taken back, are left out); one query, bounded by ``sample_ids``."""
        if not sample_ids:
            return {}
        table = sample_labels.c
        newest = (
            select(func.max(table.seq))
            .where(table.scenario == self.scenario, table.sample_id.in_(list(sample_ids)))
            .group_by(table.sample_id)
        )
        query = select(table.sample_id, table.reward).where(table.seq.in_(newest))
        with self._database.read() as connection:
            rows = list(connection.execute(query))
        return {str(i): float(r) for i, r in rows if r is not None}
