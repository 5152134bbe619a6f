"""Seals under each epoch: decision types, modes, arms, fillers, rewards (E-SEAL-*)."""

from __future__ import annotations

import logging
from pathlib import Path

import attrs
import pytest

from agent_ecc import (
    Candidate,
    ContentStore,
    DirectoryRegistry,
    ExecutionCache,
    JournalError,
    LocalBackend,
    Member,
    RewardError,
    Scorer,
    SealJournal,
    SealSession,
    apply_rewards,
    arm_session,
    audit_epochs,
)
from agent_ecc.scorer import label_reward
from agent_ecc.seal import SealError
from agent_ecc.synthetic import SyntheticExecutor, SyntheticWorld
from agent_ecc.versions import GraderVersion, iter_checks

GROUPS = [
    ("correct", "wrong", "skip", "crash"),
    ("correct", "shallow", "empty", "noapply"),
    ("shallow", "correct", "crash", "wrong"),
    ("skip", "correct", "correct", "wrong"),
]


def groups(
    world: SyntheticWorld, registry: DirectoryRegistry, prefix: str, kinds=GROUPS
) -> list[Candidate]:
    """Groups produced under the epoch in force (the producer's pinned epoch)."""
    out = []
    version = registry.grader(registry.resolve_start().epoch.version_id)
    for g, behaviours in enumerate(kinds):
        members = []
        for i, behaviour in enumerate(behaviours):
            record, score = world.produce(
                version, ("t1", "t2")[g % 2], f"{prefix}g{g}m{i}", behaviour
            )
            members.append(Member(record.record_id, record, score, 1.0 if score.passed else 0.0))
        out.append(Candidate(f"{prefix}g{g}", handle=None, members=tuple(members)))
    return out


def scorer_for(
    world: SyntheticWorld, store: ContentStore, **options
) -> tuple[Scorer, SyntheticExecutor]:
    executor = SyntheticExecutor(store)
    return Scorer([world.adapter], store, backend=LocalBackend(executor.run), **options), executor


def _index(member: Member) -> int:
    return int(member.member_id.rsplit("m", 1)[1])


def fresh_reward(
    world: SyntheticWorld,
    registry: DirectoryRegistry,
    version_id: str,
    kinds,
    candidate: Candidate,
    member: Member,
) -> float:
    g = int(candidate.group_id.rsplit("g", 1)[1])
    behaviour = kinds[g][_index(member)]
    assert member.execution is not None
    _, score = world.produce(
        registry.grader(version_id), member.execution.task_id, "fresh", behaviour
    )
    return 1.0 if score.passed else 0.0


def test_grader_fix_mid_training_trains_the_fresh_rewards(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore, tmp_path: Path
) -> None:
    """rule: E-REG-2, E-SEAL-12: epochs 0/1/2; reuse what holds, re-parse what evidence decides,
    re-execute only the rest; trained rewards equal grading afresh under the batch's epoch."""
    scorer, executor = scorer_for(world, store)
    journal = SealJournal(tmp_path / "seals.jsonl")
    produced = groups(world, registry, "e0")
    types_by_epoch = {}
    for index in (0, 1, 2):
        if index:
            registry.publish_grader(world.version(index), source=f"fix {index}")
        session = SealSession(registry, scorer, batch_id=str(index))
        assembly = session.assemble(produced)
        decision = session.finish(assembly, journal=journal)
        assert decision.epoch.index == index
        types_by_epoch[index] = decision.stats["decisions"]
        rewards = decision.rewards()
        for candidate, _ in assembly.batch:
            for member in candidate.members:
                expected = fresh_reward(world, registry, f"g{index}", GROUPS, candidate, member)
                assert rewards[member.member_id] == expected, (index, member.member_id)
        assert {c.group_id for c, _ in assembly.batch} == {c.group_id for c in produced}
    # epoch 0: the recorded verdicts hold; epoch 1: same executions, new rule (re-parse), the
    # empty and non-applying patches by evidence; epoch 2: the hardened suite runs only where
    # the original suite passed (short circuit).
    assert types_by_epoch[0] == {"reuse": 16}
    assert set(types_by_epoch[1]) == {"reparse", "evidence"}
    assert types_by_epoch[1]["evidence"] == 2
    # identical attempts share one request: each executed once (the cache), fewer than members
    assert types_by_epoch[2]["reexec"] >= len(executor.runs) > 0
    assert set(executor.runs.values()) == {1}
    assert audit_epochs(journal.read(), registry).ok


def test_discard_and_audit_modes(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-SEAL-7, E-SEAL-11: discard excludes groups whose labels changed; audit executes
    nothing and trains the recorded rewards while counting what would change."""
    produced = groups(world, registry, "a")
    registry.publish_grader(world.version(1), source="fix")
    scorer, executor = scorer_for(world, store)
    discard = SealSession(registry, scorer, "d", mode="discard").assemble(produced)
    # every group of GROUPS holds a skip or crash attempt whose label changes under g1, except g1
    assert [c.group_id for c, _ in discard.batch] == ["ag1"]
    assert {g.reason for _, g in discard.excluded} == {"disagrees"}
    registry.publish_grader(world.version(2), source="hardened")
    audit = SealSession(registry, scorer, "k", mode="audit").assemble(produced)
    assert executor.runs == {}
    assert len(audit.batch) == 4
    assert audit.decision.stats["changed"] > 0
    recorded = {m.member_id: m.recorded_reward for c in produced for m in c.members}
    assert audit.decision.rewards() == recorded
    assert "reexec" in audit.decision.stats["decisions"]


def test_undeterminable_neutralizes_backfill_and_fillers(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-SEAL-2, E-SEAL-3, E-SEAL-8, E-GRADE-2: an infra member's group is excluded and
    backfilled; short batches report a shortfall unless neutral fillers are asked for."""
    registry.publish_grader(world.version(1), source="fix")
    bad = groups(world, registry, "b", [("correct", "infra"), ("correct", "wrong")])
    spare = groups(world, registry, "s", [("correct", "wrong")])
    scorer, _ = scorer_for(world, store)
    asked = []

    def backfill(need: int, considered: frozenset[str], remaining_s: float) -> list[Candidate]:
        asked.append((need, considered))
        return [c for c in spare if c.group_id not in considered]

    assembly = SealSession(registry, scorer, "1").assemble(bad, backfill=backfill, deadline_s=30)
    assert [c.group_id for c, _ in assembly.batch] == ["bg1", "sg0"]
    assert [c.group_id for c, _ in assembly.excluded] == ["bg0"]
    assert asked[0] == (1, frozenset({"bg0", "bg1"}))
    assert assembly.decision.shortfall == 0
    short = SealSession(registry, scorer, "2").assemble(bad)
    assert short.decision.shortfall == 1
    filled = SealSession(registry, scorer, "3", fillers="neutral").assemble(bad)
    assert filled.decision.shortfall == 0
    assert filled.decision.group_ids("filler") == ["bg0"]
    assert {filled.decision.rewards()[m.member_id] for m in bad[0].members} == {0.0}
    # a member whose attempt left no record: its group is neutralized (E-GRADE-2)
    orphan = Candidate("o", None, (Member("o1", None, None, 1.0), bad[1].members[0]))
    out = SealSession(registry, scorer, "4").assemble([orphan])
    assert out.excluded
    assert out.decision.members[0].type == "undeterminable"


def test_recorded_undeterminable_final(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-SEAL-13: 'final' keeps a recorded undeterminable member undeterminable without
    executing; 'resolve' re-executes it."""
    registry.publish_grader(world.version(1), source="fix")
    produced = groups(world, registry, "f", [("infra", "correct")])
    final, executor = scorer_for(world, store, recorded_undeterminable="final")
    out = SealSession(registry, final, "1").assemble(produced)
    assert executor.runs == {}
    assert out.decision.members[0].type == "undeterminable"
    assert out.excluded
    audit = SealSession(registry, final, "2", mode="audit").assemble(produced)
    assert audit.decision.rewards()["fg0m0"] == 0.0
    assert audit.batch
    resolve, executor = scorer_for(world, store)
    SealSession(registry, resolve, "3").assemble(produced)
    assert sum(executor.runs.values()) == 1


def test_policies_and_arms(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-SEAL-9, E-SEAL-11: full re-executes everything once per cache; reparse_all
    re-parses unchanged executions; never pins the startup epoch and records the pointer."""
    produced = groups(world, registry, "p")
    registry.publish_grader(world.version(1), source="fix")
    scorer, executor = scorer_for(world, store)
    cache = ExecutionCache()
    full = arm_session("full_compatible", registry, scorer, batch_id="1", cache=cache).assemble(
        produced
    )
    assert full.decision.given.policy == "full"
    assert set(full.decision.stats["decisions"]) <= {"reexec", "undeterminable"}
    runs = sum(executor.runs.values())
    again = arm_session("full_compatible", registry, scorer, batch_id="2", cache=cache).assemble(
        produced
    )
    assert sum(executor.runs.values()) == runs
    assert again.decision.stats["cache_hits"] > 0
    reparse = SealSession(registry, scorer, "3", policy="reparse_all").assemble(produced)
    assert set(reparse.decision.stats["decisions"]) == {"reparse"}
    # A pinned control opened as a trainer opens it: no batch id; each session gets its own.
    never_session = arm_session("never", registry, scorer, cache=cache)
    assert never_session.batch_id.startswith("never-")
    assert arm_session("never", registry, scorer).batch_id != never_session.batch_id
    never = never_session.assemble(produced)
    assert never.decision.epoch.index == 0
    assert never.decision.given.pointer.epoch.index == 1
    assert never.decision.stats["decisions"] == {"reuse": 16}
    keep = arm_session("keep", registry, scorer, batch_id="5").assemble(produced)
    assert keep.decision.given.mode == "audit"


def test_short_circuit_off_evaluates_every_check(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-SEAL-11: short_circuit=False also evaluates the checks after a logical fail."""
    produced = groups(world, registry, "c", [("wrong", "correct")])
    registry.publish_grader(world.version(2), source="hardened")
    on, ran_on = scorer_for(world, store)
    SealSession(registry, on, "1").assemble(produced)
    off, ran_off = scorer_for(world, store, short_circuit=False)
    SealSession(registry, off, "2").assemble(produced)
    assert len(ran_on.runs) == 1
    assert len(ran_off.runs) == 2


def test_session_reads_the_pointer_once(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-SEAL-1: a publication after the session started does not change its epoch."""
    scorer, _ = scorer_for(world, store)
    session = SealSession(registry, scorer, "1")
    registry.publish_grader(world.version(1), source="fix")
    assert session.assemble(groups(world, registry, "x")).decision.epoch.index == 0


def test_apply_rewards_is_all_or_nothing(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-SEAL-4: a sample the decision does not cover means no reward is set."""
    produced = groups(world, registry, "r", [("correct", "wrong")])
    scorer, _ = scorer_for(world, store)
    decision = SealSession(registry, scorer, "1").assemble(produced).decision
    samples = [
        {"id": "rg0m0", "reward": None},
        {"id": "rg0m1", "reward": None},
        {"id": "stranger", "reward": None},
    ]
    with pytest.raises(RewardError, match="stranger"):
        apply_rewards(
            decision,
            samples,
            member_id=lambda s: s["id"],
            set_reward=lambda s, r: s.update(reward=r),
        )
    assert all(s["reward"] is None for s in samples)
    apply_rewards(
        decision,
        samples[:2],
        member_id=lambda s: s["id"],
        set_reward=lambda s, r: s.update(reward=r),
    )
    assert [s["reward"] for s in samples[:2]] == [1.0, 0.0]


def test_fail_is_strict_and_journal_refuses_older_epochs(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore, tmp_path: Path
) -> None:
    """rule: E-SEAL-2, E-SEAL-5 (I3, I5): a failed seal trains nothing; the journal refuses a
    decision older than the last committed epoch and a second decision for one batch."""
    produced = groups(world, registry, "j", [("correct", "wrong")])
    scorer, _ = scorer_for(world, store)
    journal = SealJournal(tmp_path / "j.jsonl")
    old = SealSession(registry, scorer, "old")
    failed = old.fail(RuntimeError("backend down"), produced)
    assert set(failed.rewards().values()) == {0.0}
    assert failed.failed == "RuntimeError: backend down"
    registry.publish_grader(world.version(1), source="fix")
    new = SealSession(registry, scorer, "new")
    new.finish(new.assemble(produced), journal=journal)
    with pytest.raises(JournalError, match="I3"):
        old.finish(old.assemble(produced), journal=journal)
    again = SealSession(registry, scorer, "new")
    with pytest.raises(JournalError, match="I5"):
        again.finish(again.assemble(produced), journal=journal)
    assert [d.batch_id for d in journal.read()] == ["new"]


def test_label_reward() -> None:
    assert (label_reward("pass"), label_reward("fail"), label_reward("undeterminable")) == (
        1.0,
        0.0,
        None,
    )


def _official(world: SyntheticWorld, registry: DirectoryRegistry) -> GraderVersion:
    """g0's checks graded under the official rule (same executions, other grading identities)."""
    entries = []
    for entry in registry.grader("g0").entries:
        check = next(iter_checks(entry.spec))
        official = world.adapter.check(
            check.check_id,
            image=check.execution["image"],
            eval_script=check.execution["eval_script"],
            suite=check.grading["suite"],
            rule="official",
        )
        entries.append(attrs.evolve(entry, spec=official))
    return GraderVersion("g-official", tuple(entries))


def test_infrastructure_failures_graded_as_fails_are_counted_and_warned(
    world: SyntheticWorld,
    registry: DirectoryRegistry,
    store: ContentStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """rule: E-GRADE-4, I2: under official an execution that failed for infrastructure reasons
    is a fail, and every such member (reused from its record or re-executed) is counted in
    ``stats["infra_fails"]`` and warned about, naming the logical rule; under logical the same
    member is undeterminable and its group neutralized."""
    kinds = [("correct", "infra"), ("wrong", "correct")]
    scorer, _ = scorer_for(world, store)
    startup = groups(world, registry, "a", kinds)  # recorded under g0 (4.1: infra is a fail)
    caplog.set_level(logging.WARNING, logger="agent_ecc.seal")
    session = SealSession(registry, scorer, "b0")
    decision = session.finish(session.assemble(startup))
    assert decision.stats["infra_fails"] == 1  # the recorded fail, reused
    assert decision.rewards()["ag0m1"] == 0.0
    assert "ag0m1" in caplog.text
    assert "logical" in caplog.text
    registry.publish_grader(_official(world, registry), source="official")
    session = SealSession(registry, scorer, "b1")
    decision = session.finish(session.assemble(groups(world, registry, "b", kinds)))
    infra = next(m for m in decision.members if m.member_id == "bg0m1")
    assert (infra.type, infra.label, infra.checks[0].infra) == ("reuse", "fail", True)
    session = SealSession(registry, scorer, "b2")
    decision = session.finish(session.assemble(startup))  # re-executed under official
    infra = next(m for m in decision.members if m.member_id == "ag0m1")
    assert (infra.type, infra.label, infra.checks[0].infra) == ("reexec", "fail", True)
    assert decision.stats["infra_fails"] == 1
    wrong = next(m for m in decision.members if m.member_id == "ag1m0")
    assert wrong.label == "fail"
    assert not wrong.checks[0].infra  # a fail the patch earned is not counted
    registry.publish_grader(world.version(1), source="logical")
    session = SealSession(registry, scorer, "b3")
    decision = session.finish(session.assemble(startup))
    assert decision.stats["infra_fails"] == 0
    assert [g.outcome for g in decision.groups] == ["excluded", "batch"]


def test_fillers_pad_to_the_batch_size_and_no_further(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-SEAL-8: neutral fillers make up exactly what the batch lacks, even when more
    groups were excluded (a backfilled group excluded too); found by scripts/mutation (mutant:
    the fillers asked are the batch size plus the batch, not less it)."""
    registry.publish_grader(world.version(1), source="fix")
    produced = groups(world, registry, "b", [("correct", "infra"), ("correct", "wrong")])
    spare = groups(world, registry, "s", [("infra", "correct")])

    def backfill(need: int, considered: frozenset[str], remaining_s: float) -> list[Candidate]:
        return [c for c in spare if c.group_id not in considered]

    scorer, _ = scorer_for(world, store)
    session = SealSession(registry, scorer, "1", fillers="neutral")
    assembly = session.assemble(produced, backfill=backfill, deadline_s=30)
    assert (
        len(assembly.decision.group_ids("excluded")) + len(assembly.decision.group_ids("filler"))
        == 2
    )  # both infra groups: one is the filler, one stays excluded
    assert len(assembly.batch) == len(produced)
    assert assembly.decision.group_ids("filler") == ["bg0"]
    assert assembly.decision.shortfall == 0


def test_a_batch_keeps_its_id_and_is_finished_once(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-SEAL-2, E-SEAL-5: the journal names the batch by the id given (mutant: a fresh
    id replaces it), and an assembly is finished once (mutant: a second finish passes)."""
    produced = groups(world, registry, "k", [("correct", "wrong")])
    scorer, _ = scorer_for(world, store)
    session = arm_session("ecc", registry, scorer, batch_id="given")
    assert session.batch_id == "given"
    assembly = session.assemble(produced)
    assert session.finish(assembly).batch_id == "given"
    with pytest.raises(SealError, match="already finished"):
        session.finish(assembly)


def test_variance_filtering_excludes_uniform_groups_and_undeterminable_ones_are_neutralized(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-GRADE-6, E-GRADE-2, E-SEAL-10: with ``filtering="variance"`` the seal excludes
    a decided group whose rewards are all equal and keeps one whose rewards differ (mutant: the
    filter looks at the groups outside the batch); an undeterminable group's members are marked
    neutralized (mutant: never marked); executions and transport attempts are counted from
    none (mutant: a counter starts at 1). Found by scripts/mutation."""
    registry.publish_grader(world.version(1), source="fix")
    produced = groups(
        world, registry, "v", [("correct", "correct"), ("correct", "wrong"), ("correct", "infra")]
    )
    scorer, executor = scorer_for(world, store)
    decision = SealSession(registry, scorer, "1", filtering="variance").assemble(produced).decision
    assert decision.group_ids("batch") == ["vg1"]
    assert decision.group_ids("excluded") == ["vg0", "vg2"]
    assert [g.reason for g in decision.groups] == ["uniform", "decided", "undeterminable"]
    assert [m.neutralized for m in decision.members] == [False] * 4 + [True] * 2
    # Counted from none: one execution, one attempt, nothing retried or given up.
    assert sum(executor.runs.values()) == decision.stats["executions"] == 1
    transport = {"attempts": 1, "retried": 0, "given_up": 0, "failures": {}}
    assert decision.stats["transport"] == transport
