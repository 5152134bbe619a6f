"""Prepared re-execution: plans under the current epoch, exact reuse, take-over, fallback,
re-planning at each publication, retirement (E-PREP-1..3, I8)."""

from __future__ import annotations

import threading
from typing import Any

from agent_ecc import (
    Candidate,
    ContentStore,
    DirectoryRegistry,
    ExecutionCache,
    LocalBackend,
    Member,
    Preparer,
    Scorer,
    SealSession,
)
from agent_ecc.execution import ExecRequest, RawOutput
from agent_ecc.synthetic import SyntheticExecutor, SyntheticWorld

BEHAVIOURS = ("correct", "shallow", "wrong", "correct")


def _groups(world: SyntheticWorld, registry: DirectoryRegistry, prefix: str, n: int = 2):
    version = registry.grader("g0")
    out = []
    for g in range(n):
        members = []
        for i, behaviour in enumerate(BEHAVIOURS):
            record, score = world.produce(version, "t1", f"{prefix}{g}m{i}{behaviour}", behaviour)
            record = type(record)(record.record_id, record.task_id, record.world, record.patch, ())
            members.append(Member(record.record_id, record, score, 1.0 if score.passed else 0.0))
        out.append(Candidate(f"{prefix}{g}", None, tuple(members)))
    return out


def _scorer(world: SyntheticWorld, store: ContentStore) -> tuple[Scorer, SyntheticExecutor]:
    executor = SyntheticExecutor(store)
    return Scorer([world.adapter], store, backend=LocalBackend(executor.run)), executor


def test_nothing_under_the_startup_epoch_then_exact_results_at_the_seal(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-PREP-1, E-PREP-2, E-PREP-3, I8: no plan at epoch 0; at the fix every admitted
    group is planned; the seal takes the results (no execution of its own) and decides the
    same rewards as a seal without preparer."""
    scorer, executor = _scorer(world, store)
    preparer = Preparer(registry, scorer, capacity=4, threads=False)
    groups = _groups(world, registry, "a")
    for group in groups:
        preparer.admit(group)
    assert preparer.stats["planned"] == 0
    registry.publish_grader(world.version(1), source="fix")
    assert preparer.refresh()
    # identical patches share one job; runs were dropped from the records so all re-execute
    assert preparer.stats["planned"] == 3
    assert preparer.run_pending() == 3
    prepared = SealSession(registry, scorer, "1", prepared=preparer).assemble(groups)
    assert prepared.decision.stats["executions"] == 0
    assert prepared.decision.stats["prepared"] == {"ready": 3, "cache": 5}
    alone, _ = _scorer(world, store)
    plain = SealSession(registry, alone, "2").assemble(groups)
    assert prepared.decision.rewards() == plain.decision.rewards()
    assert sum(executor.runs.values()) == 3


def test_another_epoch_is_never_used_and_queued_work_is_taken_over(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-PREP-1, E-PREP-2, I8: results of epoch 1 are not used under epoch 2; at the
    publication the undecided groups are planned again; a job not started is taken over."""
    scorer, _ = _scorer(world, store)
    preparer = Preparer(registry, scorer, capacity=2, threads=False)
    groups = _groups(world, registry, "b")
    for group in groups:
        preparer.admit(group)
    registry.publish_grader(world.version(1), source="fix")
    preparer.refresh()
    preparer.run_pending()
    registry.publish_grader(world.version(2), source="hardened")
    # a seal under epoch 2 before the preparer saw the publication: nothing of epoch 1 counts
    early = SealSession(registry, scorer, "0", prepared=preparer).assemble(groups[:1])
    assert "ready" not in early.decision.stats["prepared"]
    assert preparer.refresh()
    own = scorer.with_cache(ExecutionCache())  # not the executions the early seal cached
    taken = SealSession(registry, own, "1", prepared=preparer).assemble(groups[1:])
    assert taken.decision.stats["prepared"].get("taken_over", 0) > 0
    assert taken.decision.stats["executions"] > 0


def _group(world: SyntheticWorld, registry: DirectoryRegistry, gid: str, task: str, kind: str):
    record, score = world.produce(registry.grader("g0"), task, f"{gid}m0", kind)
    return Candidate(gid, None, (Member(record.record_id, record, score, 1.0),))


def test_settled_and_retired_groups_are_not_planned_again(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-PREP-3: a group a seal decided, or the trainer retired, is not prepared at the
    next publication; a group still waiting is."""
    scorer, _ = _scorer(world, store)
    preparer = Preparer(registry, scorer, capacity=2, threads=False)
    decided = _group(world, registry, "decided", "t1", "correct")
    retired = _group(world, registry, "retired", "t2", "correct")
    waiting = _group(world, registry, "waiting", "t1", "shallow")
    for group in (decided, retired, waiting):
        preparer.admit(group)
    registry.publish_grader(world.version(1), source="fix")
    preparer.refresh()
    session = SealSession(registry, scorer, "1", prepared=preparer)
    session.finish(session.assemble([decided]))
    preparer.retire([retired])
    registry.publish_grader(world.version(2), source="hardened")
    preparer.refresh()
    g2 = registry.grader("g2")
    expected = {r.request_id for _, r in scorer.plan(waiting.members[0], g2)[:1]}
    assert set(preparer.jobs()) == expected
    assert set(preparer.jobs().values()) == {"queued"}


def test_a_running_job_is_waited_for_and_an_unusable_result_executed_again(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-PREP-2: the seal waits for a running job; a prepared infrastructure failure is
    not taken: the seal executes the request itself."""
    executor = SyntheticExecutor(store)
    gate = threading.Event()
    started = threading.Event()
    calls: list[str] = []

    def run(request: ExecRequest) -> RawOutput:
        calls.append(request.request_id)
        if len(calls) == 1:
            started.set()
            gate.wait(30)
            raise RuntimeError("sandbox lost")  # the prepared run fails: no verdict from it
        return executor.run(request)

    scorer = Scorer([world.adapter], store, backend=LocalBackend(run, capacity=2))
    preparer = Preparer(registry, scorer, capacity=1, threads=True)
    try:
        group = _groups(world, registry, "d", n=1)[0]
        group = Candidate("d", None, group.members[:1])
        preparer.admit(group)
        registry.publish_grader(world.version(1), source="fix")
        preparer.refresh()
        assert started.wait(30)
        result: dict[str, Any] = {}

        def seal() -> None:
            result["a"] = SealSession(registry, scorer, "1", prepared=preparer).assemble([group])

        sealer = threading.Thread(target=seal)
        sealer.start()
        while preparer.stats["claims"] == 0:  # the seal has asked for the running job
            started.wait(0.01)
        gate.set()
        sealer.join(30)
    finally:
        gate.set()
        preparer.close()
    decision = result["a"].decision
    assert decision.stats["prepared"] == {"waited": 1}
    assert decision.members[0].label == "pass"
    assert len(calls) == 2
