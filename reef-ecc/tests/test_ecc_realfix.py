"""A grader fix mid-training, end to end, with real executions (git, bash, pytest, the service).

Epoch 0 grades with rules like swebench 4.1 (a skipped FAIL_TO_PASS test is no failure; a
non-zero exit with no failed test passes); epoch 1 fixes both; epoch 2 adds a hardened suite
(SWE-ABS) graded against a reference set of gold runs. The attempts are the calc fixtures' real
patches; the producer runs every suite of its pinned spec through the executor.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agent_ecc import (
    Candidate,
    ContentStore,
    DirectoryRegistry,
    LocalBackend,
    Member,
    Scorer,
    SealJournal,
    SealSession,
    audit_epochs,
)
from agent_ecc.recompute.executor import Executor
from agent_ecc.recompute.service import HTTPBackend, ReverifyService
from agent_ecc.scorer import label_reward

# conftest.py loaded the fixture script under this name (tests/ is not a package)
fixture_script = sys.modules["agent_ecc_test_fixtures"]

GROUPS = (("gold", "skip", "forge", "wrong"), ("shallow", "cheat", "noapply", "empty"))


def _produce(swe: Any, executor: Executor, version: Any, prefix: str) -> list[Candidate]:
    """Groups of real attempts, each recorded and graded under ``version`` (the pin)."""
    out = []
    for g, variants in enumerate(GROUPS):
        members = []
        for variant in variants:
            record, score = fixture_script.produce(
                swe, executor, version, f"{prefix}-{variant}", swe.patches[variant]
            )
            members.append(Member(record.record_id, record, score, 1.0 if score.passed else 0.0))
        out.append(Candidate(f"{prefix}-g{g}", None, tuple(members)))
    return out


def _variant(member_id: str) -> str:
    return member_id.rsplit("-", 1)[1]


def test_grader_fix_mid_training_with_real_executions(
    swe: Any, executor: Executor, reference: list[str], swe_store: ContentStore, tmp_path: Path
) -> None:
    """rule: E-REG-2, E-SEAL-12, E-GRADE-3, E-GRADE-5, I4: seals under epochs 0/1/2 reuse what
    still holds, re-parse what stored evidence decides, re-execute only what they cannot, and
    train exactly the rewards of grading every attempt afresh under the batch's epoch."""
    registry = DirectoryRegistry(tmp_path / "registry")
    registry.publish_grader(swe.version(0), source="startup")
    registry.publish_world(swe.world(), source="startup")
    produced = _produce(swe, executor, registry.grader("g0"), "a")
    journal = SealJournal(tmp_path / "seals.jsonl")
    versions = {1: swe.version(1), 2: swe.version(2, reference=reference)}
    with ReverifyService(swe_store, executor=executor, capacity=2) as service:
        backend = HTTPBackend(service.url)
        scorer = Scorer([swe.adapter], swe_store, backend=backend)
        seen: dict[int, Any] = {}
        for index in (0, 1, 2):
            if index:
                registry.publish_grader(versions[index], source=f"fix {index}")
            before = service.health()["counters"].get("executed", 0)
            session = SealSession(registry, scorer, batch_id=str(index))
            decision = session.finish(session.assemble(produced), journal=journal)
            executed = service.health()["counters"].get("executed", 0) - before
            assert decision.epoch.index == index
            seen[index] = (decision, executed)
            # the trained reward of every member is the one grading it afresh gives
            fresh_version = registry.grader(f"g{index}")
            rewards = decision.rewards()
            for candidate in produced:
                for member in candidate.members:
                    variant = _variant(member.member_id)
                    _, fresh = fixture_script.produce(
                        swe,
                        executor,
                        fresh_version,
                        f"fresh-{index}-{variant}",
                        swe.patches[variant],
                    )
                    assert fresh.verdict == fixture_script.EXPECTED[variant][index]
                    assert rewards[member.member_id] == label_reward(fresh.verdict), (
                        index,
                        variant,
                    )
        backend.close()
    types = {i: d.stats["decisions"] for i, (d, _) in seen.items()}
    # epoch 0: every recorded verdict still holds
    assert types[0] == {"reuse": 8}
    assert seen[0][1] == 0
    # epoch 1: same executions, new rule: the stored logs decide; empty and non-applying
    # patches by evidence; nothing executed
    assert types[1] == {"reparse": 6, "evidence": 2}
    assert seen[1][1] == 0
    assert seen[1][0].stats["changed"] == 2  # skip and forge lose their 4.1 pass
    # epoch 2: the original suite re-parsed (or evidence), the hardened suite executed only for
    # the attempts that still pass the original one (gold, shallow, cheat); cheat's patch
    # without its copy of the hardened test file IS shallow's patch: one request, run once
    by_member = {m.member_id: m for m in seen[2][0].members}
    executed_for = sorted(
        _variant(mid) for mid, m in by_member.items() if any(c.type == "reexec" for c in m.checks)
    )
    assert executed_for == ["cheat", "gold", "shallow"]
    hardened = {_variant(mid): m.checks[1].request_id for mid, m in by_member.items()}
    assert hardened["cheat"] == hardened["shallow"] != hardened["gold"]
    assert seen[2][1] == 2
    assert seen[2][0].stats["executions"] == 2
    skipped = [c.type for c in by_member["a-skip"].checks]
    assert skipped == ["reparse", "skipped"]
    assert audit_epochs(journal.read(), registry).ok


def test_attempts_pinned_to_the_fix_are_reused_under_the_hardened_epoch(
    swe: Any, executor: Executor, reference: list[str], tmp_path: Path
) -> None:
    """rule: E-SEAL-12, E-GRADE-3: an attempt graded under g1 keeps its original-suite verdict
    under g2 (same grading and execution identities); only the hardened suite is new."""
    registry = DirectoryRegistry(tmp_path / "registry")
    registry.publish_grader(swe.version(0), source="startup")
    registry.publish_world(swe.world(), source="startup")
    registry.publish_grader(swe.version(1), source="fix")
    produced = _produce(swe, executor, registry.grader("g1"), "b")
    registry.publish_grader(swe.version(2, reference=reference), source="hardened")
    backend = LocalBackend(executor.run, capacity=2)
    scorer = Scorer([swe.adapter], swe.store, backend=backend)
    decision = SealSession(registry, scorer, "1").assemble(produced).decision
    backend.close()
    first = {m.member_id: m.checks[0].type for m in decision.members}
    assert {first[f"b-{v}"] for v in ("gold", "shallow", "cheat", "skip", "forge", "wrong")} == {
        "reuse"
    }
    assert {first["b-empty"], first["b-noapply"]} == {"reuse"}
    rewards = decision.rewards()
    for member_id, reward in rewards.items():
        assert reward == label_reward(fixture_script.EXPECTED[_variant(member_id)][2])


def test_reference_set_leaves_the_flaky_test_out(reference: list[str]) -> None:
    """rule: E-GRADE-5: G holds the tests passing in every gold run: the flaky one drops out."""
    assert fixture_script.FLAKY not in reference
    assert "tests/test_clamp_hard.py::test_clamp_high_any_bound" in reference
    assert "tests/test_clamp.py::test_clamp_high" in reference
