"""Sealing a batch: every group decided under one epoch before it trains (contract sections 4, 5).

A :class:`SealSession` reads the registry's pointer once (E-SEAL-1), decides the groups offered
and those backfilled within the deadline (E-SEAL-2), sorts them into the batch handed over, the
groups excluded and those unused (E-SEAL-3), and makes the :class:`Decision` that the journal
records and :func:`apply_rewards` applies.

Why this module is long: the seal is one decision (contract sections 4 and 5) whose steps share
the epoch read once and the deadline; split, each part would need the whole session.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol, TypeAlias, TypeVar

import attrs

from agent_ecc.candidates import Candidate, Member
from agent_ecc.records import Verdict
from agent_ecc.registry import Epoch, PointerRead
from agent_ecc.scorer import (
    CheckDecision,
    DecisionType,
    ExecutionCache,
    MemberDecision,
    Policy,
    PreparedSource,
    Scorer,
    infra_fail,
    label_reward,
)
from agent_ecc.versions import GraderVersion

Mode: TypeAlias = Literal["repair", "discard", "audit"]
MODES: tuple[Mode, ...] = ("repair", "discard", "audit")
Arm: TypeAlias = Literal["keep", "discard", "ecc", "never", "full_compatible"]
ARMS: tuple[Arm, ...] = ("keep", "discard", "ecc", "never", "full_compatible")
Outcome: TypeAlias = Literal["batch", "excluded", "unused", "filler"]
Backfill: TypeAlias = Callable[[int, frozenset[str], float], Iterable[Candidate]]
S = TypeVar("S")
_log = logging.getLogger(__name__)


class RegistryView(Protocol):
    """What a seal reads from a registry (a :class:`DirectoryRegistry`, or a replay's view)."""

    def read_pointer(self) -> PointerRead:
        """The pointer, read once."""
        ...

    def grader(self, version_id: str) -> GraderVersion:
        """A published grader version."""
        ...

    def startup_epoch(self) -> Epoch:
        """Epoch 0."""
        ...


class SealError(RuntimeError):
    """A seal was asked something it cannot do (an unknown mode, a finished assembly, ...)."""


class RewardError(ValueError):
    """apply_rewards found a sample the decision does not cover; no reward was set (I6)."""


# -- what a seal was given (the replay's input) and what it decided (never an input) --------
@attrs.frozen
class OfferedMember:
    """A member as offered: its record's id, recorded verdict and the reward it carried."""

    member_id: str
    record_id: str | None
    prior_version: str | None
    prior_verdict: str | None
    recorded_reward: float


@attrs.frozen
class OfferedGroup:
    """A group as offered in one round."""

    group_id: str
    members: tuple[OfferedMember, ...]


@attrs.frozen
class Given:
    """Everything a seal decided from, apart from the records and raw outputs themselves."""

    batch_id: str
    pointer: PointerRead
    pinned: Epoch | None
    arm: str | None
    mode: Mode
    policy: Policy
    strict: bool
    fillers: Literal["neutral"] | None
    filtering: Literal["none", "variance"]
    short_circuit: bool
    recorded_undeterminable: Literal["resolve", "final"]
    rounds: tuple[tuple[OfferedGroup, ...], ...]


@attrs.frozen
class MemberOutcome:
    """A member's decision and the reward it trains with (None: it does not train)."""

    member_id: str
    group_id: str
    record_id: str | None
    type: DecisionType
    label: Verdict | None
    recorded_reward: float
    reward: float | None
    neutralized: bool
    checks: tuple[CheckDecision, ...]


@attrs.frozen
class GroupOutcome:
    """Where a decided group went, and why."""

    group_id: str
    outcome: Outcome
    reason: str


@attrs.frozen
class Decision:
    """A seal's decision: what it was given, the epoch, and every member's and group's fate."""

    given: Given
    epoch: Epoch
    members: tuple[MemberOutcome, ...]
    groups: tuple[GroupOutcome, ...]
    shortfall: int
    stats: dict[str, Any]
    failed: str | None = None

    @property
    def batch_id(self) -> str:
        """The batch this decision seals."""
        return self.given.batch_id

    @property
    def pinned(self) -> bool:
        """Whether the epoch was pinned rather than read from the pointer."""
        return self.given.pinned is not None

    def rewards(self) -> dict[str, float]:
        """The trained reward of every member of the groups handed over."""
        handed = {g.group_id for g in self.groups if g.outcome in ("batch", "filler")}
        return {
            m.member_id: m.reward
            for m in self.members
            if m.group_id in handed and m.reward is not None
        }

    def group_ids(self, outcome: Outcome) -> list[str]:
        """The groups with ``outcome``, in decision order."""
        return [g.group_id for g in self.groups if g.outcome == outcome]


@attrs.define
class Assembly:
    """The result of :meth:`SealSession.assemble`, to finish (journal) or fail."""

    batch: list[tuple[Candidate, GroupOutcome]]
    excluded: list[tuple[Candidate, GroupOutcome]]
    unused: list[Candidate]
    decision: Decision
    finished: bool = False


def _offered(candidate: Candidate) -> OfferedGroup:
    return OfferedGroup(
        candidate.group_id,
        tuple(
            OfferedMember(
                m.member_id,
                m.execution.record_id if m.execution else None,
                m.prior.grader_version if m.prior else None,
                m.prior.verdict if m.prior else None,
                m.recorded_reward,
            )
            for m in candidate.members
        ),
    )


class SealSession:
    """One seal of one batch (E-SEAL-1..13); reads the registry's pointer once, on creation.

    :param mode: ``repair``, ``discard`` or ``audit``.
    :param policy: ``ecc``, ``full`` or ``reparse_all``.
    :param pin: seal under this epoch instead of the pointer's (the ``never`` arm).
    :param fillers: None, or ``"neutral"`` to fill a short batch with excluded groups at zero
        advantage (E-SEAL-8).
    :param filtering: ``"none"``, or ``"variance"`` to exclude groups whose trained rewards are
        all equal, after the seal (E-GRADE-6).
    :param strict: :meth:`fail` neutralizes every member (True) or keeps recorded rewards.
    :param prepared: a preparer whose results for exactly this epoch may be taken (E-PREP-2).
    :param policy_after_startup: the policy once the epoch is not the startup one
        (``full_compatible``).
    """

    def __init__(
        self,
        registry: RegistryView,
        scorer: Scorer,
        batch_id: str,
        *,
        mode: Mode = "repair",
        policy: Policy = "ecc",
        pin: Epoch | None = None,
        fillers: Literal["neutral"] | None = None,
        filtering: Literal["none", "variance"] = "none",
        strict: bool = True,
        prepared: PreparedSource | None = None,
        arm: str | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if mode not in MODES:
            raise SealError(f"unknown seal mode {mode!r}; known: {', '.join(MODES)}")
        if fillers not in (None, "neutral"):
            raise SealError(f"fillers is None or 'neutral', not {fillers!r}")
        if filtering not in ("none", "variance"):
            raise SealError(f"filtering is 'none' or 'variance', not {filtering!r}")
        self.registry = registry
        self.scorer = scorer
        self.batch_id = batch_id
        self.pointer = registry.read_pointer()  # E-SEAL-1: once per seal
        self.epoch = pin if pin is not None else self.pointer.epoch
        self.version = registry.grader(self.epoch.version_id)
        self.mode = mode
        self.policy = policy
        self.pin = pin
        self.fillers = fillers
        self.filtering = filtering
        self.strict = strict
        self.prepared = prepared
        self.arm = arm
        self._clock = clock

    def _given(self, rounds: Sequence[Sequence[Candidate]]) -> Given:
        return Given(
            batch_id=self.batch_id,
            pointer=self.pointer,
            pinned=self.pin,
            arm=self.arm,
            mode=self.mode,
            policy=self.policy,
            strict=self.strict,
            fillers=self.fillers,
            filtering=self.filtering,
            short_circuit=self.scorer.short_circuit,
            recorded_undeterminable=self.scorer.recorded_undeterminable,
            rounds=tuple(tuple(_offered(c) for c in r) for r in rounds),
        )

    def _group(
        self, candidate: Candidate, decisions: dict[str, MemberDecision]
    ) -> tuple[GroupOutcome, list[MemberOutcome]]:
        members = [decisions[m.member_id] for m in candidate.members]
        types = {d.type for d in members}
        if self.mode == "audit":
            outcome: Outcome = "batch"
            reason = "audit"
        elif "pending" in types:
            outcome, reason = "unused", "pending"
        elif "undeterminable" in types:
            outcome, reason = "excluded", "undeterminable"
        elif self.mode == "discard" and any(
            label_reward(d.label) != m.recorded_reward
            for d, m in zip(members, candidate.members, strict=True)
        ):
            outcome, reason = "excluded", "disagrees"
        else:
            outcome, reason = "batch", "decided"
        out = []
        for decision, member in zip(members, candidate.members, strict=True):
            reward: float | None
            if outcome == "batch":
                keep = self.mode != "repair"
                reward = member.recorded_reward if keep else label_reward(decision.label)
            else:
                reward = None
            out.append(
                MemberOutcome(
                    member.member_id,
                    candidate.group_id,
                    decision.record_id,
                    decision.type,
                    decision.label,
                    member.recorded_reward,
                    reward,
                    outcome == "excluded" and reason == "undeterminable",
                    decision.checks,
                )
            )
        if (
            outcome == "batch"
            and self.filtering == "variance"
            and len({m.reward for m in out}) <= 1
        ):
            outcome, reason = "excluded", "uniform"
            out = [attrs.evolve(m, reward=None) for m in out]
        return GroupOutcome(candidate.group_id, outcome, reason), out

    def assemble(
        self,
        candidates: Sequence[Candidate],
        backfill: Backfill | None = None,
        deadline_s: float | None = None,
    ) -> Assembly:
        """Decide ``candidates`` and backfill until the batch is full or the deadline passes.

        ``backfill(need, considered, remaining_s)`` returns more candidates (at most ``need``
        are decided; the rest are unused).
        """
        start = self._clock()
        deadline = None if deadline_s is None else start + deadline_s
        target = len(candidates)
        rounds: list[list[Candidate]] = []
        batch: list[tuple[Candidate, GroupOutcome]] = []
        excluded: list[tuple[Candidate, GroupOutcome]] = []
        unused: list[Candidate] = []
        members: list[MemberOutcome] = []
        groups: list[GroupOutcome] = []
        stats: dict[str, Any] = {
            "decisions": Counter[str](),
            "executions": 0,
            "cache_hits": 0,
            "prepared": Counter[str](),
            "transport": {"attempts": 0, "retried": 0, "given_up": 0, "failures": Counter[str]()},
            "changed": 0,
            "backfilled": 0,
        }
        considered: set[str] = set()
        offered = list(candidates)
        while offered:
            rounds.append(offered)
            considered.update(c.group_id for c in offered)
            decisions, round_stats = self.scorer.decide(
                [m for c in offered for m in c.members],
                self.version,
                epoch_index=self.epoch.index,
                policy=self.policy,
                execute=self.mode != "audit",
                deadline=deadline,
                prepared=self.prepared,
            )
            _merge(stats, round_stats)
            for candidate in offered:
                group, outs = self._group(candidate, decisions)
                members.extend(outs)
                groups.append(group)
                if group.outcome == "batch":
                    batch.append((candidate, group))
                elif group.outcome == "excluded":
                    excluded.append((candidate, group))
                else:
                    unused.append(candidate)
            need = target - len(batch)
            remaining = math.inf if deadline is None else deadline - self._clock()
            if need <= 0 or backfill is None or remaining <= 0:
                break
            more = [
                c
                for c in backfill(need, frozenset(considered), remaining)
                if c.group_id not in considered
            ]
            offered, extra = more[:need], more[need:]
            unused.extend(extra)
            stats["backfilled"] += len(offered)
        fillers = self._fill(target - len(batch), excluded, members, groups)
        for candidate, group in fillers:
            batch.append((candidate, group))
            excluded.remove(next(e for e in excluded if e[0] is candidate))
        stats["decisions"] = dict(Counter(m.type for m in members))
        stats["changed"] = len(
            [
                m
                for m in members
                if m.label in ("pass", "fail") and label_reward(m.label) != m.recorded_reward
            ]
        )
        infra = [m.member_id for m in members if m.label == "fail" and infra_fail(m.checks)]
        stats["infra_fails"] = len(infra)
        if infra:
            _log.warning(
                "batch %s: %d member(s) labelled fail only because their execution failed for "
                "infrastructure reasons (the official rule grades that as a fail), e.g. %s; "
                "grade with the logical rule to neutralize such groups instead",
                self.batch_id,
                len(infra),
                ", ".join(infra[:3]),
            )
        stats["prepared"] = dict(stats["prepared"])
        stats["transport"]["failures"] = dict(stats["transport"]["failures"])
        stats["seconds"] = self._clock() - start
        decision = Decision(
            given=self._given(rounds),
            epoch=self.epoch,
            members=tuple(members),
            groups=tuple(groups),
            shortfall=max(0, target - len(batch)),
            stats=stats,
        )
        return Assembly(batch=batch, excluded=excluded, unused=unused, decision=decision)

    def _fill(
        self,
        short: int,
        excluded: list[tuple[Candidate, GroupOutcome]],
        members: list[MemberOutcome],
        groups: list[GroupOutcome],
    ) -> list[tuple[Candidate, GroupOutcome]]:
        if self.fillers != "neutral" or short <= 0:
            return []
        chosen = []
        for candidate, group in excluded[:short]:
            filler = GroupOutcome(group.group_id, "filler", f"neutral filler ({group.reason})")
            groups[groups.index(group)] = filler
            for i, member in enumerate(members):
                if member.group_id == group.group_id:
                    members[i] = attrs.evolve(member, reward=0.0, neutralized=True)
            chosen.append((candidate, filler))
        return chosen

    def finish(self, assembly: Assembly, journal: SealJournalLike | None = None) -> Decision:
        """Record the decision in ``journal`` (durably, before anything trains) and return it."""
        if assembly.finished:
            raise SealError(f"batch {self.batch_id} was already finished")
        if journal is not None:
            journal.append(assembly.decision)
        assembly.finished = True
        if self.prepared is not None:  # decided under this epoch: nothing to prepare for them
            self.prepared.settled(
                g.group_id for g in assembly.decision.groups if g.outcome != "unused"
            )
        return assembly.decision

    def fail(
        self,
        error: BaseException,
        candidates: Sequence[Candidate],
        journal: SealJournalLike | None = None,
    ) -> Decision:
        """The decision of a seal that raised: strict, every member neutralized at reward 0.0."""
        members = tuple(
            MemberOutcome(
                m.member_id,
                c.group_id,
                m.execution.record_id if m.execution else None,
                "undeterminable",
                None,
                m.recorded_reward,
                0.0 if self.strict else m.recorded_reward,
                self.strict,
                (),
            )
            for c in candidates
            for m in c.members
        )
        decision = Decision(
            given=self._given([list(candidates)]),
            epoch=self.epoch,
            members=members,
            groups=tuple(GroupOutcome(c.group_id, "batch", "seal failed") for c in candidates),
            shortfall=0,
            stats={"decisions": {"undeterminable": len(members)}},
            failed=f"{type(error).__name__}: {error}",
        )
        if journal is not None:
            journal.append(decision)
        return decision


class SealJournalLike(Protocol):
    """What :meth:`SealSession.finish` writes to (a :class:`agent_ecc.journal.SealJournal`)."""

    def append(self, decision: Decision) -> None:
        """Record ``decision`` durably, or raise."""
        ...


def _merge(into: dict[str, Any], stats: dict[str, Any]) -> None:
    into["executions"] += stats["executions"]
    into["cache_hits"] += stats["cache_hits"]
    into["prepared"].update(stats["prepared"])
    transport = into["transport"]
    for key in ("attempts", "retried", "given_up"):
        transport[key] += stats["transport"][key]
    transport["failures"].update(stats["transport"]["failures"])


def arm_session(
    arm: Arm,
    registry: RegistryView,
    scorer: Scorer,
    *,
    batch_id: str | None = None,
    cache: ExecutionCache | None = None,
    **options: Any,
) -> SealSession:
    """A seal configured as one comparison arm (contract section 5; E-SEAL-11).

    ``batch_id`` names the batch in the journal; without one (as a comparison arm is usually
    opened, ``arm_session("never", registry, scorer, cache=...)``) the session gets a fresh
    unique id ``<arm>-<hex>``, so two arm sessions never collide in one journal (I5). A replay
    passes the logged batch's id.
    """
    if arm not in ARMS:
        raise SealError(f"unknown arm {arm!r}; known: {', '.join(ARMS)}")
    if batch_id is None:
        batch_id = f"{arm}-{uuid.uuid4().hex[:16]}"
    if cache is not None:
        scorer = scorer.with_cache(cache)
    if arm == "keep":
        return SealSession(registry, scorer, batch_id, mode="audit", arm=arm, **options)
    if arm == "discard":
        return SealSession(registry, scorer, batch_id, mode="discard", arm=arm, **options)
    if arm == "ecc":
        return SealSession(registry, scorer, batch_id, mode="repair", arm=arm, **options)
    if arm == "never":
        return SealSession(
            registry, scorer, batch_id, pin=registry.startup_epoch(), arm=arm, **options
        )
    session = SealSession(registry, scorer, batch_id, mode="repair", arm=arm, **options)
    if session.epoch.index != 0:
        session.policy = "full"
    return session


def apply_rewards(
    decision: Decision,
    samples: Sequence[S],
    *,
    member_id: Callable[[S], str],
    set_reward: Callable[[S, float], None],
) -> None:
    """Set every sample's reward to its decided reward, or none of them (E-SEAL-4, I6).

    Every sample must be a member of a group the decision handed over; otherwise
    :class:`RewardError` is raised before any reward is set.
    """
    rewards = decision.rewards()
    planned = []
    for sample in samples:
        mid = member_id(sample)
        if mid not in rewards:
            raise RewardError(
                f"sample of member {mid!r} is not in batch {decision.batch_id}'s decision"
            )
        planned.append((sample, rewards[mid]))
    for sample, reward in planned:
        set_reward(sample, reward)


__all__ = [
    "ARMS",
    "MODES",
    "Arm",
    "Assembly",
    "Candidate",
    "Decision",
    "Given",
    "GroupOutcome",
    "Member",
    "MemberOutcome",
    "OfferedGroup",
    "OfferedMember",
    "RewardError",
    "SealError",
    "SealSession",
    "apply_rewards",
    "arm_session",
]
