"""Audits over the journal and the records (E-AUDIT-3, E-AUDIT-4).

:func:`audit_epochs` checks I4 (every seal read the epoch in force at its pointer read) and I3
(epochs never decrease), listing pinned seals apart. :func:`verdict_conflicts` finds requests
whose identical executions got both logical verdicts under one grading identity: a scorer's
precondition (deterministic scoring) that the seal does not check.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import attrs

from agent_ecc.adapters import Adapter
from agent_ecc.records import ExecutionRecord, RecordedScore
from agent_ecc.registry import DirectoryRegistry, epoch_in_force
from agent_ecc.seal import Decision
from agent_ecc.store import ContentStore
from agent_ecc.versions import GraderVersion, iter_checks


@attrs.frozen
class EpochAudit:
    """The result of :func:`audit_epochs`."""

    ok: bool
    unexpected: tuple[str, ...]
    pinned: tuple[str, ...]
    seals: int


def audit_epochs(decisions: Sequence[Decision], registry: DirectoryRegistry) -> EpochAudit:
    """Check I4 and I3 over committed ``decisions`` (in commit order)."""
    publications = registry.publications()
    unexpected: list[str] = []
    pinned: list[str] = []
    last = -1
    for decision in decisions:
        pointer = decision.given.pointer
        in_force = epoch_in_force(publications, pointer.read_at)
        if in_force is None or in_force.index != pointer.epoch.index:
            unexpected.append(
                f"batch {decision.batch_id}: pointer read at {pointer.read_at} named epoch "
                f"{pointer.epoch.index}, the log says "
                f"{None if in_force is None else in_force.index} (I4)"
            )
        if decision.pinned:
            pinned.append(
                f"batch {decision.batch_id}: pinned to epoch {decision.epoch.index}, "
                f"pointer named {pointer.epoch.index}"
            )
        elif decision.epoch.index != pointer.epoch.index:
            unexpected.append(
                f"batch {decision.batch_id}: sealed under epoch {decision.epoch.index}, "
                f"read {pointer.epoch.index} (I4)"
            )
        if decision.epoch.index < last:
            unexpected.append(
                f"batch {decision.batch_id}: epoch {decision.epoch.index} after epoch {last} (I3)"
            )
        last = max(last, decision.epoch.index)
    return EpochAudit(
        ok=not unexpected, unexpected=tuple(unexpected), pinned=tuple(pinned), seals=len(decisions)
    )


@attrs.frozen
class Conflict:
    """One request whose identical executions got both verdicts under one grading identity."""

    request_id: str
    grading_identity: str
    records: tuple[str, ...]


def verdict_conflicts(
    records: Sequence[ExecutionRecord],
    scores: Sequence[RecordedScore],
    versions: Sequence[GraderVersion],
    adapters: Sequence[Adapter],
    store: ContentStore,
) -> list[Conflict]:
    """Requests whose identical executions got both verdicts under one grading identity."""
    by_name = {a.name: a for a in adapters}
    seen: dict[tuple[str, str], dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    run_request: dict[tuple[str, str], str] = {}
    for record in records:
        for version in versions:
            if not version.covers(record.task_id, record.world):
                continue
            for check in iter_checks(version.lookup(record.task_id, record.world).spec):
                adapter = by_name[check.adapter]
                for run in record.runs:
                    if run.execution_identity != check.execution_identity or not run.usable:
                        continue
                    request = adapter.request(check, record, store).request_id
                    run_request[(record.record_id, check.execution_identity)] = request
                    verdict = adapter.grade(check, run, store)
                    if verdict != "undeterminable":
                        seen[(request, check.grading_identity)][verdict].add(record.record_id)
    for score in scores:
        for check_verdict in score.checks:
            recorded = run_request.get((score.record_id, check_verdict.execution_identity))
            if recorded is not None and check_verdict.verdict != "undeterminable":
                seen[(recorded, check_verdict.grading_identity)][check_verdict.verdict].add(
                    score.record_id
                )
    conflicts = []
    for (request, identity), verdicts in sorted(seen.items()):
        if "pass" in verdicts and "fail" in verdicts:
            involved = tuple(sorted(verdicts["pass"] | verdicts["fail"]))
            conflicts.append(
                Conflict(request_id=request, grading_identity=identity, records=involved)
            )
    return conflicts


__all__ = ["Conflict", "EpochAudit", "audit_epochs", "verdict_conflicts"]
