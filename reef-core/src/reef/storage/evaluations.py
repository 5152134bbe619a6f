"""Each artifact's evaluation results, and the eval gate's decisions.

A result (:class:`reef.core.evals.EvalResult`) is one artifact's score on one eval set, with
every item's outcome and the sampling settings; it is written once per artifact and set (the
same weights are the same artifact, so a restart that publishes them again measures nothing
twice). A gate decision says whether the engine serves an artifact, and why; it is written once
too, so a decision survives a restart and is never taken again. The engine serves, of a trainer's
artifacts, the one decided ``served`` last (:meth:`ArtifactEvaluations.served_artifact`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any, Final

import attrs
from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Float,
    Index,
    Integer,
    PrimaryKeyConstraint,
    RowMapping,
    String,
    Table,
    Text,
    UniqueConstraint,
    select,
    true,
    tuple_,
)

from reef.core.evals import EvalResult, ItemOutcome
from reef.storage import json_values
from reef.storage.database import Database
from reef.storage.tables import metadata
from reef.storage.upserts import insert_or_ignore

__all__ = [
    "ArtifactEvaluations",
    "EvaluatedArtifact",
    "GateDecision",
    "artifact_evals",
    "gate_decisions",
]

#: Results read from the store at a time when every one is read (an export).
_PAGE: Final = 200

artifact_evals = Table(
    "reef_artifact_evals",
    metadata,
    Column("scenario", String(400), nullable=False),
    Column("trainer", String(400), nullable=False),
    Column("artifact_id", String(400), nullable=False),
    Column("eval", String(400), nullable=False),
    Column("score", Float, nullable=False),
    # Each item's outcome (JSON list) and the request fields they were sampled with.
    Column("items", Text, nullable=False),
    Column("sampling", Text, nullable=False),
    Column("measured_at", Float, nullable=False),
    PrimaryKeyConstraint("scenario", "trainer", "artifact_id", "eval"),
    comment="Each artifact's score on each eval set, with every item's outcome.",
)

gate_decisions = Table(
    "reef_gate_decisions",
    metadata,
    Column("seq", BigInteger().with_variant(Integer(), "sqlite"), primary_key=True),
    Column("scenario", String(400), nullable=False),
    Column("trainer", String(400), nullable=False),
    Column("artifact_id", String(400), nullable=False),
    Column("served", Boolean, nullable=False),
    Column("reason", Text, nullable=False),
    Column("decided_at", Float, nullable=False),
    UniqueConstraint("scenario", "trainer", "artifact_id"),
    Index(None, "scenario", "trainer", "seq"),
    sqlite_autoincrement=True,
    comment="The eval gate's decision on each artifact: served or held back, and why.",
)


@attrs.frozen
class GateDecision:
    """Whether the engine serves ``artifact_id``, and why."""

    trainer: str
    artifact_id: str
    served: bool
    reason: str
    decided_at: float

    def to_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class EvaluatedArtifact:
    """One artifact's scores, as a curve of eval score per artifact draws them.

    :ivar number: its place among the scenario's evaluated artifacts, in the order they were
        first evaluated (1: the first).
    :ivar scores: its score on each set it was evaluated on.
    :ivar evaluated_at: when its first result was measured.
    :ivar served: the gate's decision (``None``: the scenario has no gate, or it took none).
    :ivar reason: the decision's reason, if any.
    """

    trainer: str
    artifact_id: str
    number: int
    scores: Mapping[str, float]
    evaluated_at: float
    served: bool | None
    reason: str | None


class ArtifactEvaluations:
    """One scenario's evaluation results and gate decisions."""

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario

    # -- results ---------------------------------------------------------------------------

    def save(self, result: EvalResult) -> None:
        """Keep ``result`` (a result already kept for its artifact and set stays)."""
        row = {
            "scenario": self.scenario,
            "trainer": result.trainer,
            "artifact_id": result.artifact_id,
            "eval": result.eval,
            "score": result.score,
            "items": json_values.dump([item.to_json() for item in result.items]),
            "sampling": json_values.dump(dict(result.sampling)),
            "measured_at": result.at,
        }
        with self._database.write() as connection:
            insert_or_ignore(connection, artifact_evals, [row])

    def result(self, trainer: str, artifact_id: str, eval_name: str) -> EvalResult | None:
        """The kept result of ``artifact_id`` on ``eval_name``, if any."""
        table = artifact_evals.c
        found = self._results(
            (table.trainer == trainer) & (table.artifact_id == artifact_id)
            & (table.eval == eval_name)
        )  # fmt: skip
        return found[0] if found else None

    def results(self, trainer: str | None = None, *, limit: int = 100) -> list[EvalResult]:
        """The newest ``limit`` results (of ``trainer``, else of every trainer), oldest first."""
        where = true() if trainer is None else artifact_evals.c.trainer == trainer
        return self._results(where, limit=limit)

    def every_result(self, trainer: str | None = None) -> Iterator[EvalResult]:
        """Every result (of ``trainer``, else of every trainer), oldest first, read a page at a
        time: what an export writes, in memory that does not grow with the store."""
        table = artifact_evals.c
        keys = (table.measured_at, table.trainer, table.artifact_id, table.eval)
        where = true() if trainer is None else table.trainer == trainer
        after: tuple[Any, ...] | None = None
        while True:
            query = select(artifact_evals).where(table.scenario == self.scenario, where)
            if after is not None:
                query = query.where(tuple_(*keys) > tuple_(*after))
            with self._database.read() as connection:
                rows = list(connection.execute(query.order_by(*keys).limit(_PAGE)).mappings())
            yield from (self._result(row) for row in rows)
            if len(rows) < _PAGE:
                return
            after = tuple(rows[-1][key.name] for key in keys)

    def artifacts(
        self, trainer: str | None = None, *, limit: int
    ) -> tuple[list[EvaluatedArtifact], int]:
        """The evaluated artifacts (of ``trainer``, else of every trainer), in the order they
        were first evaluated, each with its score on each set and the gate's decision: the last
        ``limit`` of them, and how many there are. Reads the results without their items."""
        table = artifact_evals.c
        where = true() if trainer is None else table.trainer == trainer
        query = (
            select(table.trainer, table.artifact_id, table.eval, table.score, table.measured_at)
            .where(table.scenario == self.scenario, where)
            .order_by(table.measured_at, table.eval)
        )
        decided = select(
            gate_decisions.c.trainer,
            gate_decisions.c.artifact_id,
            gate_decisions.c.served,
            gate_decisions.c.reason,
        ).where(
            gate_decisions.c.scenario == self.scenario,
            true() if trainer is None else gate_decisions.c.trainer == trainer,
        )
        with self._database.read() as connection:
            rows = list(connection.execute(query))
            decisions = {(t, a): (s, r) for t, a, s, r in connection.execute(decided)}
        scores: dict[tuple[str, str], dict[str, float]] = {}
        first: dict[tuple[str, str], float] = {}
        for row_trainer, artifact_id, eval_name, score, at in rows:
            key = (row_trainer, artifact_id)
            scores.setdefault(key, {})[eval_name] = score
            first.setdefault(key, at)
        found = [
            EvaluatedArtifact(
                key[0], key[1], number, scores[key], first[key], *decisions.get(key, (None, None))
            )
            for number, key in enumerate(scores, 1)
        ]
        return found[-limit:], len(found)

    def _results(self, where: Any, *, limit: int = 100) -> list[EvalResult]:
        table = artifact_evals.c
        query = (
            select(artifact_evals)
            .where(table.scenario == self.scenario, where)
            .order_by(table.measured_at.desc(), table.eval)
            .limit(limit)
        )
        with self._database.read() as connection:
            rows = list(connection.execute(query).mappings())
        return [self._result(row) for row in reversed(rows)]

    def _result(self, row: RowMapping) -> EvalResult:
        return EvalResult(
            scenario=self.scenario,
            trainer=row["trainer"],
            artifact_id=row["artifact_id"],
            eval=row["eval"],
            score=row["score"],
            items=tuple(ItemOutcome(**item) for item in json_values.load(row["items"])),
            sampling=json_values.load(row["sampling"]),
            at=row["measured_at"],
        )

    # -- the gate's decisions --------------------------------------------------------------

    def decide(self, trainer: str, artifact_id: str, *, served: bool, reason: str) -> GateDecision:
        """Keep the gate's decision on ``artifact_id``; an artifact decided before keeps its
        first decision, which is returned."""
        row = {
            "scenario": self.scenario,
            "trainer": trainer,
            "artifact_id": artifact_id,
            "served": served,
            "reason": reason,
            "decided_at": time.time(),
        }
        with self._database.write() as connection:
            insert_or_ignore(connection, gate_decisions, [row])
        decision = self.decision(trainer, artifact_id)
        assert decision is not None
        return decision

    def decision(self, trainer: str, artifact_id: str) -> GateDecision | None:
        """The gate's decision on ``artifact_id``, if it took one."""
        table = gate_decisions.c
        found = self._decisions((table.trainer == trainer) & (table.artifact_id == artifact_id))
        return found[0] if found else None

    def decisions(self, trainer: str, *, limit: int = 20) -> list[GateDecision]:
        """The newest ``limit`` decisions of ``trainer``, oldest first."""
        return self._decisions(gate_decisions.c.trainer == trainer, limit=limit)

    def served_artifact(self, trainer: str) -> str | None:
        """The artifact of ``trainer`` the gate let serve last (``None`` before any)."""
        table = gate_decisions.c
        found = self._decisions((table.trainer == trainer) & table.served, limit=1)
        return found[0].artifact_id if found else None

    def _decisions(self, where: Any, *, limit: int = 20) -> list[GateDecision]:
        table = gate_decisions.c
        query = (
            select(gate_decisions)
            .where(table.scenario == self.scenario, where)
            .order_by(table.seq.desc())
            .limit(limit)
        )
        with self._database.read() as connection:
            rows = list(connection.execute(query).mappings())
        return [
            GateDecision(
                row["trainer"], row["artifact_id"], row["served"], row["reason"], row["decided_at"]
            )
            for row in reversed(rows)
        ]
