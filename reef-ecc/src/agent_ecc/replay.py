"""Replaying logged seals (E-REPLAY-1..6): re-decide each seal from what it was given only.

The reader takes from each logged decision its :class:`~agent_ecc.seal.Given` part, never what
it decided. The replay builds the versions from the epoch bodies (checking every identity),
derives each seal's epoch from the publication log at the pointer-read time, serves the recorded
raw outputs with :class:`RecordedBackend`, re-decides with :class:`SealSession` and compares, per
seal and member, with what was logged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from agent_ecc.adapters import Adapter
from agent_ecc.backends import RecordedBackend, Recording
from agent_ecc.candidates import Candidate, Member
from agent_ecc.records import ExecutionRecord, RecordedScore
from agent_ecc.registry import Epoch, PointerRead, Publication, epoch_in_force
from agent_ecc.scorer import ExecutionCache, Scorer
from agent_ecc.seal import Backfill, Decision, Given, OfferedGroup, SealSession
from agent_ecc.store import ContentStore
from agent_ecc.versions import GraderVersion, VersionError, build_version


@attrs.frozen
class ReplayReport:
    """The replayed decisions and every mismatch with the logged ones."""

    replayed: tuple[Decision, ...]
    mismatches: tuple[str, ...]
    unserved: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Zero mismatches and no execution the run did not make."""
        return not self.mismatches and not self.unserved


class _ReplayRegistry:
    def __init__(
        self,
        pointer: PointerRead,
        epoch: Epoch,
        versions: Mapping[str, GraderVersion],
        startup: Epoch,
    ):
        self._pointer = attrs.evolve(pointer, epoch=epoch)
        self._versions = versions
        self._startup = startup

    def read_pointer(self) -> PointerRead:
        return self._pointer

    def grader(self, version_id: str) -> GraderVersion:
        return self._versions[version_id]

    def startup_epoch(self) -> Epoch:
        return self._startup


def _candidate(
    group: OfferedGroup, records: Mapping[str, ExecutionRecord], scores: Mapping[str, RecordedScore]
) -> Candidate:
    members = tuple(
        Member(
            m.member_id,
            records.get(m.record_id) if m.record_id else None,
            scores.get(m.record_id) if m.record_id else None,
            m.recorded_reward,
        )
        for m in group.members
    )
    return Candidate(group.group_id, None, members)


def _compare(logged: Decision, replayed: Decision) -> list[str]:
    where = f"batch {logged.batch_id}"
    out = []
    if logged.epoch.index != replayed.epoch.index:
        out.append(f"{where}: epoch {logged.epoch.index} logged, {replayed.epoch.index} replayed")
    theirs = {m.member_id: m for m in replayed.members}
    for mine in logged.members:
        other = theirs.get(mine.member_id)
        if other is None:
            out.append(f"{where} member {mine.member_id}: not replayed")
            continue
        for field in ("type", "label", "reward", "neutralized", "record_id"):
            if getattr(mine, field) != getattr(other, field):
                out.append(
                    f"{where} member {mine.member_id}: {field} {getattr(mine, field)!r} logged, "
                    f"{getattr(other, field)!r} replayed"
                )
    for outcome in ("batch", "excluded", "filler", "unused"):
        mine_ids = logged.group_ids(outcome)
        their_ids = replayed.group_ids(outcome)
        if mine_ids != their_ids:
            out.append(f"{where}: groups {outcome} {mine_ids} logged, {their_ids} replayed")
    return out


def _later_rounds(rounds: list[list[Candidate]]) -> Backfill:
    """A backfill that gives back the logged later rounds, one per call (E-REPLAY-2)."""
    later = iter(rounds)

    def backfill(need: int, considered: frozenset[str], remaining_s: float) -> list[Candidate]:
        del need, considered, remaining_s
        return next(later, [])

    return backfill


def replay_seals(
    logged: Sequence[Decision],
    *,
    bodies: Mapping[str, Mapping[str, Any]],
    publications: Sequence[Publication],
    records: Mapping[str, ExecutionRecord],
    scores: Mapping[str, RecordedScore],
    recordings: Sequence[Recording],
    adapters: Sequence[Adapter],
    store: ContentStore,
) -> ReplayReport:
    """Re-decide every logged seal from its given part and compare (contract section 8)."""
    mismatches: list[str] = []
    try:
        versions = {vid: build_version(body, adapters) for vid, body in bodies.items()}
    except VersionError as error:
        return ReplayReport((), (f"epoch body: {error}",), ())
    grader_epochs = [p.epoch for p in publications if p.kind == "grader"]
    cache = ExecutionCache()  # one for the run: a later seal may use what an earlier one executed
    backend = RecordedBackend(recordings)
    replayed = []
    for decision in logged:
        given: Given = decision.given  # E-REPLAY-1: the decided part is never read as input
        epoch = epoch_in_force(list(publications), given.pointer.read_at)
        if epoch is None:
            mismatches.append(
                f"batch {given.batch_id}: no epoch in force at {given.pointer.read_at}"
            )
            continue
        registry = _ReplayRegistry(given.pointer, epoch, versions, grader_epochs[0])
        scorer = Scorer(
            adapters,
            store,
            backend=backend,
            cache=cache,
            short_circuit=given.short_circuit,
            recorded_undeterminable=given.recorded_undeterminable,
        )
        session = SealSession(
            registry,
            scorer,
            given.batch_id,
            mode=given.mode,
            policy=given.policy,
            pin=given.pinned,
            fillers=given.fillers,
            filtering=given.filtering,
            strict=given.strict,
            arm=given.arm,
        )
        rounds = [[_candidate(g, records, scores) for g in r] for r in given.rounds]
        assembly = session.assemble(rounds[0], backfill=_later_rounds(rounds[1:]))
        replayed.append(assembly.decision)
        mismatches.extend(_compare(decision, assembly.decision))
    return ReplayReport(tuple(replayed), tuple(mismatches), tuple(backend.unserved))
