"""The scorer decides members' labels under one grader version (contract section 4).

For each check of a member's target spec it takes the cheapest way its policy allows: reuse the
recorded verdict, decide from evidence, re-parse a stored output, or re-execute through its
backend (sharing executions through its cache). It never reads a previous decision (I7).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, wait
from typing import Any, Literal, Protocol, TypeAlias

import attrs

from agent_ecc.adapters import Adapter
from agent_ecc.backends import Backend
from agent_ecc.candidates import Member
from agent_ecc.execution import ExecRequest, InfraFailure, Outcome, Pending, RawOutput
from agent_ecc.records import ExecutionRecord, RecordedScore, Verdict, combine
from agent_ecc.store import ContentStore, is_blank
from agent_ecc.versions import Check, GraderVersion, iter_checks, verify_check

DecisionType: TypeAlias = Literal[
    "reuse", "evidence", "reparse", "reexec", "pending", "undeterminable"
]
CheckDecisionType: TypeAlias = Literal[
    "reuse", "evidence", "reparse", "reexec", "pending", "undeterminable", "skipped"
]
Policy: TypeAlias = Literal["ecc", "full", "reparse_all"]
POLICIES: tuple[Policy, ...] = ("ecc", "full", "reparse_all")
_BY_COST: tuple[DecisionType, ...] = ("reuse", "evidence", "reparse", "reexec")


class ScorerError(RuntimeError):
    """The scorer cannot decide as asked (no backend to execute with, a bad argument)."""


@attrs.frozen
class CheckDecision:
    """How one check of a member was decided, and its verdict (None: not decided).

    ``infra``: the verdict is a fail only because the execution failed for infrastructure
    reasons (its run stopped: a missing snapshot or image, an executor error), which the
    ``official`` rule grades as a fail; the seal counts these in ``stats["infra_fails"]``.
    """

    check_id: str
    type: CheckDecisionType
    verdict: Verdict | None
    grading_identity: str
    execution_identity: str
    request_id: str | None = None
    infra: bool = False


@attrs.frozen
class MemberDecision:
    """A member's decision type and label under the batch epoch."""

    member_id: str
    record_id: str | None
    type: DecisionType
    label: Verdict | None
    checks: tuple[CheckDecision, ...]
    reason: str = ""


class PreparedSource(Protocol):
    """Where a seal takes prepared results from (a :class:`agent_ecc.preparer.Preparer`)."""

    def claim(self, request: ExecRequest, epoch_index: int) -> tuple[str, Future[Outcome] | None]:
        """How the preparer answers ``request`` under ``epoch_index``: a kind and its future."""
        ...

    def settled(self, group_ids: Iterable[str]) -> None:
        """The groups a committed seal decided: not to be prepared again."""
        ...


class ExecutionCache:
    """Executions shared by every seal that uses this cache: one future per request identity.

    An infrastructure failure is not kept, so a later seal asks again.
    """

    def __init__(self) -> None:
        self._futures: dict[str, Future[Outcome]] = {}
        self._lock = threading.Lock()

    def get(self, request_id: str) -> Future[Outcome] | None:
        """The future of ``request_id`` if one was submitted."""
        with self._lock:
            return self._futures.get(request_id)

    def put(self, request_id: str, future: Future[Outcome]) -> None:
        """Keep ``future`` for ``request_id`` (dropped again if it ends in an infra failure)."""
        with self._lock:
            self._futures[request_id] = future

        def forget_failure(done: Future[Outcome]) -> None:
            if isinstance(done.result(), InfraFailure):
                with self._lock:
                    if self._futures.get(request_id) is done:
                        del self._futures[request_id]

        future.add_done_callback(forget_failure)


@attrs.define
class _Work:
    member: Member
    record: ExecutionRecord
    checks: list[Check]
    decided: dict[str, CheckDecision]
    queue: list[Check]


def _valid_prior(member: Member) -> RecordedScore | None:
    # E-GRADE-2: only the producing attempt's own score decides.
    if member.prior is None or member.execution is None:
        return None
    return member.prior if member.prior.record_id == member.execution.record_id else None


class Scorer:
    """Decides members under a version (contract section 4).

    :param adapters: the adapters of the checks it will meet.
    :param store: the content store holding logs, patches, scripts.
    :param backend: what executes re-executions (None: a re-execution is an error).
    :param cache: an :class:`ExecutionCache` shared by the seals using this scorer.
    :param short_circuit: stop a member's checks at its first logical fail.
    :param recorded_undeterminable: ``"resolve"`` or ``"final"`` (E-SEAL-13).
    """

    def __init__(
        self,
        adapters: Sequence[Adapter],
        store: ContentStore,
        *,
        backend: Backend | None = None,
        cache: ExecutionCache | None = None,
        short_circuit: bool = True,
        recorded_undeterminable: Literal["resolve", "final"] = "resolve",
    ) -> None:
        if recorded_undeterminable not in ("resolve", "final"):
            raise ScorerError(
                f"recorded_undeterminable is 'resolve' or 'final', not {recorded_undeterminable!r}"
            )
        self.adapters: dict[str, Adapter] = {a.name: a for a in adapters}
        self.store = store
        self.backend = backend
        self.cache = cache if cache is not None else ExecutionCache()
        self.short_circuit = short_circuit
        self.recorded_undeterminable = recorded_undeterminable
        self._verified: set[tuple[str, str, str]] = set()

    def with_cache(self, cache: ExecutionCache) -> Scorer:
        """The same scorer sharing ``cache``."""
        return Scorer(
            list(self.adapters.values()),
            self.store,
            backend=self.backend,
            cache=cache,
            short_circuit=self.short_circuit,
            recorded_undeterminable=self.recorded_undeterminable,
        )

    def _adapter(self, check: Check) -> Adapter:
        key = (check.check_id, check.execution_identity, check.grading_identity)
        if key not in self._verified:
            verify_check(check, self.adapters)  # I1: never grade under an identity not named
            self._verified.add(key)
        return self.adapters[check.adapter]

    def _cheap(
        self, check: Check, member: Member, record: ExecutionRecord, policy: Policy
    ) -> CheckDecision | None:
        adapter = self._adapter(check)

        def decided(
            kind: CheckDecisionType, verdict: Verdict, infra: bool = False
        ) -> CheckDecision:
            return CheckDecision(
                check.check_id,
                kind,
                verdict,
                check.grading_identity,
                check.execution_identity,
                infra=infra,
            )

        if policy == "full":
            return None
        if policy == "ecc":
            prior = _valid_prior(member)
            for recorded in prior.checks if prior else ():
                if (
                    recorded.grading_identity == check.grading_identity
                    and recorded.execution_identity == check.execution_identity
                    and recorded.verdict != "undeterminable"
                ):
                    graded = record.run_of(check.execution_identity)  # what the producer graded
                    infra = recorded.verdict == "fail" and graded is not None and graded.stopped
                    return decided("reuse", recorded.verdict, infra)
            evidence = adapter.evidence(check, record, self.store)
            if evidence is not None:
                return decided("evidence", evidence)
        for run in record.runs:
            if run.execution_identity == check.execution_identity and run.usable:
                return decided("reparse", adapter.grade(check, run, self.store))
        return None

    def plan(
        self, member: Member, version: GraderVersion, *, policy: Policy = "ecc"
    ) -> list[tuple[Check, ExecRequest]]:
        """The executions a seal of ``member`` under ``version`` would ask for, in spec order.

        Nothing when a cheap decision already fails the member and checks short-circuit, or
        when its recorded undeterminable verdict is final. The :class:`Preparer` runs them
        ahead of the seal; with ``short_circuit`` a check after one that fails is not needed.
        """
        record = member.execution
        if record is None:
            return []
        prior = _valid_prior(member)
        if self.recorded_undeterminable == "final" and prior and prior.verdict == "undeterminable":
            return []
        needed = []
        for check in iter_checks(version.lookup(record.task_id, record.world).spec):
            cheap = self._cheap(check, member, record, policy)
            if cheap is None:
                needed.append((check, self._adapter(check).request(check, record, self.store)))
            elif cheap.verdict == "fail" and self.short_circuit:
                return []
        return needed

    def verdict_of(self, check: Check, output: RawOutput) -> Verdict:
        """The verdict of ``check``'s rule on a backend's raw output."""
        return self._verdict(check, output)[0]

    def _verdict(self, check: Check, output: RawOutput) -> tuple[Verdict, bool]:
        # also whether the verdict is a fail that only the run's infrastructure failure made
        adapter = self._adapter(check)
        run = adapter.run_from_output(check, output, self.store)
        verdict = adapter.grade(check, run, self.store)
        return verdict, verdict == "fail" and run.stopped

    def decide(
        self,
        members: Sequence[Member],
        version: GraderVersion,
        *,
        epoch_index: int,
        policy: Policy = "ecc",
        execute: bool = True,
        deadline: float | None = None,
        prepared: PreparedSource | None = None,
    ) -> tuple[dict[str, MemberDecision], dict[str, Any]]:
        """Decide ``members`` under ``version``; also the stats of this call.

        ``deadline`` is a ``time.monotonic()`` instant; executions unfinished then are pending.
        ``execute=False`` (audit) decides re-executions as ``reexec`` without a label.
        """
        if policy not in POLICIES:
            raise ScorerError(f"unknown policy {policy!r}; known: {', '.join(POLICIES)}")
        stats: dict[str, Any] = {
            "executions": 0,
            "cache_hits": 0,
            "prepared": Counter[str](),
            "transport": {"attempts": 0, "retried": 0, "given_up": 0, "failures": Counter[str]()},
        }
        results: dict[str, MemberDecision] = {}
        work: list[_Work] = []
        for member in members:
            record = member.execution
            if record is None:
                results[member.member_id] = MemberDecision(
                    member.member_id, None, "undeterminable", None, (), "no record"
                )
                continue
            checks = list(iter_checks(version.lookup(record.task_id, record.world).spec))
            item = _Work(member, record, checks, {}, [])
            prior = _valid_prior(member)
            if (
                self.recorded_undeterminable == "final"
                and prior is not None
                and prior.verdict == "undeterminable"
            ):
                self._finalize(item)
                results[member.member_id] = self._member(item, execute)
                continue
            for check in checks:
                cheap = self._cheap(check, member, record, policy)
                if cheap is not None:
                    item.decided[check.check_id] = cheap
                else:
                    item.queue.append(check)
            work.append(item)
        self._execute(
            work,
            execute=execute,
            deadline=deadline,
            prepared=prepared,
            epoch_index=epoch_index,
            stats=stats,
        )
        for item in work:
            results[item.member.member_id] = self._member(item, execute)
        stats["prepared"] = dict(stats["prepared"])
        stats["transport"]["failures"] = dict(stats["transport"]["failures"])
        return results, stats

    def _finalize(self, item: _Work) -> None:
        # E-SEAL-13: only an evidence-only verdict (an empty patch) can fail such a member.
        empty = is_blank(self.store, item.record.patch)
        for check in item.checks:
            self._adapter(check)
            item.decided[check.check_id] = CheckDecision(
                check.check_id,
                "evidence" if empty else "undeterminable",
                "fail" if empty else "undeterminable",
                check.grading_identity,
                check.execution_identity,
            )

    def _failed(self, item: _Work) -> bool:
        return any(d.verdict == "fail" for d in item.decided.values())

    def _execute(
        self,
        work: list[_Work],
        *,
        execute: bool,
        deadline: float | None,
        prepared: PreparedSource | None,
        epoch_index: int,
        stats: dict[str, Any],
    ) -> None:
        while True:
            round_: list[tuple[_Work, Check, ExecRequest, Future[Outcome]]] = []
            for item in work:
                if not item.queue:
                    continue
                if self.short_circuit and self._failed(item):
                    for check in item.queue:
                        item.decided[check.check_id] = CheckDecision(
                            check.check_id,
                            "skipped",
                            None,
                            check.grading_identity,
                            check.execution_identity,
                        )
                    item.queue.clear()
                    continue
                batch = [item.queue.pop(0)] if self.short_circuit else [*item.queue]
                if not self.short_circuit:
                    item.queue.clear()
                for check in batch:
                    request = self._adapter(check).request(check, item.record, self.store)
                    if not execute:
                        item.decided[check.check_id] = CheckDecision(
                            check.check_id,
                            "reexec",
                            None,
                            check.grading_identity,
                            check.execution_identity,
                            request.request_id,
                        )
                        continue
                    round_.append(
                        (item, check, request, self._future(request, prepared, epoch_index, stats))
                    )
            if not round_:
                return
            futures = {f for *_, f in round_}
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            wait(futures, timeout=timeout)
            for item, check, request, future in round_:
                outcome: Outcome = future.result() if future.done() else Pending(request.request_id)
                item.decided[check.check_id] = self._graded(
                    check, item.record, request, outcome, stats
                )
                if isinstance(outcome, Pending):
                    item.queue.clear()  # nothing more is asked for a member past the deadline

    def _future(
        self,
        request: ExecRequest,
        prepared: PreparedSource | None,
        epoch_index: int,
        stats: dict[str, Any],
    ) -> Future[Outcome]:
        future = self.cache.get(request.request_id)
        if future is not None:
            stats["cache_hits"] += 1
            stats["prepared"]["cache"] += 1 if prepared is not None else 0
            return future
        if prepared is not None:
            kind, claimed = prepared.claim(request, epoch_index)
            stats["prepared"][kind] += 1
            if claimed is not None:
                self.cache.put(request.request_id, claimed)
                return claimed
        if self.backend is None:
            raise ScorerError(
                f"request {request.request_id} needs an execution and the scorer has no backend"
            )
        stats["executions"] += 1
        future = self.backend.submit(request)
        self.cache.put(request.request_id, future)
        return future

    def _graded(
        self,
        check: Check,
        record: ExecutionRecord,
        request: ExecRequest,
        outcome: Outcome,
        stats: dict[str, Any],
    ) -> CheckDecision:
        def made(
            kind: CheckDecisionType, verdict: Verdict | None, infra: bool = False
        ) -> CheckDecision:
            return CheckDecision(
                check.check_id,
                kind,
                verdict,
                check.grading_identity,
                check.execution_identity,
                request.request_id,
                infra,
            )

        if isinstance(outcome, Pending):
            return made("pending", None)
        transport = stats["transport"]
        transport["attempts"] += outcome.attempts
        transport["retried"] += 1 if outcome.attempts > 1 else 0
        for reason in outcome.failures:
            transport["failures"][reason] += 1
        if isinstance(outcome, InfraFailure):
            transport["given_up"] += 1 if outcome.reason == "transport" else 0
            return made("undeterminable", "undeterminable")
        return made("reexec", *self._verdict(check, outcome))

    def _member(self, item: _Work, execute: bool) -> MemberDecision:
        checks = tuple(item.decided[c.check_id] for c in item.checks)
        verdicts = [c.verdict for c in checks if c.verdict is not None]
        record_id = item.record.record_id
        if "fail" in verdicts:
            label: Verdict | None = "fail"
        elif any(c.type == "pending" for c in checks):
            return MemberDecision(item.member.member_id, record_id, "pending", None, checks)
        elif any(c.verdict is None and c.type == "reexec" for c in checks):
            label = None  # audit: not executed
        else:
            label = combine(v for v in verdicts)
        if label == "undeterminable":
            return MemberDecision(item.member.member_id, record_id, "undeterminable", label, checks)
        kind: DecisionType = "reuse"
        for check in checks:
            for candidate in _BY_COST:
                if check.type == candidate and _BY_COST.index(candidate) > _BY_COST.index(kind):
                    kind = candidate
        return MemberDecision(item.member.member_id, record_id, kind, label, checks)


def label_reward(label: Verdict | None) -> float | None:
    """The reward of a label: 1.0 for pass, 0.0 for fail, None otherwise."""
    return {"pass": 1.0, "fail": 0.0}.get(label) if label is not None else None


def infra_fail(checks: Sequence[CheckDecision]) -> bool:
    """Whether a member's fail comes only from infrastructure failures graded as fails (under
    the ``official`` rule): every failing check failed so, so its patch was never judged."""
    failing = [c for c in checks if c.verdict == "fail"]
    return bool(failing) and all(c.infra for c in failing)


def count_types(decisions: Mapping[str, MemberDecision]) -> dict[str, int]:
    """How many members got each decision type."""
    return dict(Counter(d.type for d in decisions.values()))
