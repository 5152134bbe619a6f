"""Consumption records: which verdicts every training step trained on (E-AUDIT-1, E-AUDIT-2).

The learner writes one line per consumed sample, each field from that sample's own row, and one
completion per finished step. :func:`consumption_records` matches them with the committed seal
decisions; its manifest is ok only if every consumed sample matched its seal decision.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from agent_ecc.registry import Epoch
from agent_ecc.seal import Decision


@attrs.frozen
class ConsumedRecord:
    """One consumed sample: its member, the record and verdicts it was trained on."""

    member_id: str
    group_id: str
    record_id: str | None
    decision_type: str
    label: str | None
    reward: float
    requests: tuple[str, ...]
    grading_identities: tuple[str, ...]
    microbatch: Any
    reporter: Any


@attrs.frozen
class ConsumptionRecord:
    """A finished training step: its seal decision, its epoch and each record it consumed."""

    step: int
    batch_id: str
    epoch: Epoch
    failed_seal: bool
    records: tuple[ConsumedRecord, ...]


@attrs.frozen
class Manifest:
    """Whether every consumed sample matched its seal decision, and what did not."""

    ok: bool
    mismatches: tuple[str, ...]
    steps: int
    lines: int
    incomplete_steps: tuple[int, ...]


@attrs.frozen
class ConsumptionReport:
    """The consumption records and their manifest."""

    records: tuple[ConsumptionRecord, ...]
    manifest: Manifest


def consumption_records(
    decisions: Sequence[Decision],
    learner_lines: Iterable[Mapping[str, Any]],
    completions: Iterable[Mapping[str, Any]],
) -> ConsumptionReport:
    """Match learner lines with the seal decisions of their batches (contract section 8)."""
    by_batch = {d.batch_id: d for d in decisions}
    done = {c["batch_id"]: c for c in completions if c.get("ok")}
    lines_by_batch: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    count = 0
    for line in learner_lines:
        lines_by_batch[str(line["batch_id"])].append(line)
        count += 1
    mismatches: list[str] = []
    records: list[ConsumptionRecord] = []
    incomplete = sorted(
        int(lines[0]["step"]) for b, lines in lines_by_batch.items() if b not in done
    )
    for batch_id, completion in done.items():
        decision = by_batch.get(batch_id)
        if decision is None:
            mismatches.append(
                f"step {completion['step']}: batch {batch_id} has no committed seal decision"
            )
            continue
        rewards = decision.rewards()
        outcomes = {m.member_id: m for m in decision.members}
        consumed = []
        for line in lines_by_batch.get(batch_id, []):
            member_id = line["member_id"]
            where = f"batch {batch_id} member {member_id}"
            outcome = outcomes.get(member_id)
            if member_id not in rewards or outcome is None:
                mismatches.append(f"{where}: not handed over by the seal decision")
                continue
            if line.get("group_id") != outcome.group_id:
                mismatches.append(
                    f"{where}: group {line.get('group_id')!r}, decided {outcome.group_id!r}"
                )
            if not math.isclose(float(line["reward"]), rewards[member_id], abs_tol=1e-9):
                mismatches.append(
                    f"{where}: trained reward {line['reward']}, decided {rewards[member_id]}"
                )
            if line.get("identity", "verified") != "verified":
                mismatches.append(f"{where}: token identity {line.get('identity')!r}")
            consumed.append(
                ConsumedRecord(
                    member_id=member_id,
                    group_id=outcome.group_id,
                    record_id=outcome.record_id,
                    decision_type=outcome.type,
                    label=outcome.label,
                    reward=rewards[member_id],
                    requests=tuple(c.request_id for c in outcome.checks if c.request_id),
                    grading_identities=tuple(c.grading_identity for c in outcome.checks),
                    microbatch=line.get("microbatch"),
                    reporter=line.get("reporter"),
                )
            )
        records.append(
            ConsumptionRecord(
                step=int(completion["step"]),
                batch_id=batch_id,
                epoch=decision.epoch,
                failed_seal=decision.failed is not None,
                records=tuple(consumed),
            )
        )
    manifest = Manifest(
        ok=not mismatches,
        mismatches=tuple(mismatches),
        steps=len(records),
        lines=count,
        incomplete_steps=tuple(incomplete),
    )
    return ConsumptionReport(
        records=tuple(sorted(records, key=lambda r: r.step)), manifest=manifest
    )
