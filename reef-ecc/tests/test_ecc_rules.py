"""Agent ECC rules no broader test names: what the producer records (E-GRADE-1), zero-variance
groups decided after the seal (E-GRADE-6), the replay of a prepared seal (E-REPLAY-6), and
what the seal is given (E-SEAL-6, E-SCOPE-1)."""

from __future__ import annotations

import ast
from pathlib import Path

import attrs
import pytest

import agent_ecc
from agent_ecc import (
    Candidate,
    ContentStore,
    DirectoryRegistry,
    LocalBackend,
    Member,
    Preparer,
    RecordingBackend,
    Scorer,
    SealJournal,
    SealSession,
    load_recordings,
)
from agent_ecc.replay import replay_seals
from agent_ecc.seal import Given
from agent_ecc.synthetic import SyntheticExecutor, SyntheticWorld
from agent_ecc.versions import version_to_body


def _group(
    world: SyntheticWorld, registry: DirectoryRegistry, group_id: str, behaviours: tuple[str, ...]
) -> Candidate:
    """A group produced under the pinned epoch, its runs dropped so that a seal under a later
    epoch executes them again."""
    version = registry.grader(registry.resolve_start().epoch.version_id)
    members = []
    for i, behaviour in enumerate(behaviours):
        record, score = world.produce(version, "t1", f"{group_id}m{i}{behaviour}", behaviour)
        record = attrs.evolve(record, runs=())
        members.append(Member(record.record_id, record, score, 1.0 if score.passed else 0.0))
    return Candidate(group_id, None, tuple(members))


def test_the_producer_records_the_attempt_under_its_pinned_epoch(
    registry: DirectoryRegistry, world: SyntheticWorld
) -> None:
    """rule: E-GRADE-1 the producer records what the attempt did (its runs) and the verdict under
    the epoch it pinned at start, keyed by the attempt id; the sample carries that id as its
    member id (metadata.agent_ecc.member_id, else its sample id)."""
    pin = registry.resolve_start()
    registry.publish_grader(world.version(1), source="fix")  # after the pin: not its epoch
    version = registry.grader(pin.epoch.version_id)
    record, score = world.produce(version, "t1", "attempt-7", "skip")
    assert record.record_id == score.record_id == "attempt-7"
    assert record.runs
    assert score.grader_version == pin.epoch.version_id == "g0"
    assert score.verdict == "pass"  # g0's rule: a skipped FAIL_TO_PASS test is no failure


def test_the_sample_carries_the_attempt_as_its_member_id() -> None:
    """rule: E-GRADE-1 the sample carries the attempt's record id as its member id
    (metadata.agent_ecc.member_id, else its sample id). The sample is Reef's, so this runs where
    reef-core is installed."""
    pytest.importorskip("reef", reason="the sample side needs reef-core (reef-ecc[reef])")
    from agent_ecc.reef_seal import member_id
    from reef.core.job_data import TrajectorySample

    tagged = TrajectorySample(
        {"steps": []}, sample_id="s:1", metadata={"agent_ecc": {"member_id": "attempt-7"}}
    )
    assert member_id(tagged) == "attempt-7"
    assert member_id(TrajectorySample({"steps": []}, sample_id="attempt-8")) == "attempt-8"


def test_a_zero_variance_group_is_admitted_and_decided_after_the_seal(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-GRADE-6 a group whose recorded rewards are all equal is not dropped at admission:
    the preparer plans it, and only the seal's own rewards decide the variance filter (uniform
    under the epoch it was recorded in, split under the fix)."""
    executor = SyntheticExecutor(store)
    scorer = Scorer([world.adapter], store, backend=LocalBackend(executor.run))
    group = _group(world, registry, "g", ("skip", "correct"))
    assert {m.recorded_reward for m in group.members} == {1.0}
    before = SealSession(registry, scorer, "0", filtering="variance").assemble([group])
    assert before.decision.group_ids("excluded") == ["g"]
    preparer = Preparer(registry, scorer, capacity=2, threads=False)
    preparer.admit(group)
    registry.publish_grader(world.version(1), source="fix")
    assert preparer.refresh()
    assert preparer.stats["planned"] == 2
    preparer.run_pending()
    after = SealSession(registry, scorer, "1", filtering="variance", prepared=preparer).assemble(
        [group]
    )
    assert after.decision.group_ids("batch") == ["g"]
    assert sorted(after.decision.rewards().values()) == [0.0, 1.0]


def test_a_prepared_seal_replays_without_a_preparer(
    tmp_path: Path, registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-REPLAY-6 a seal that took the preparer's results replays to the same decision
    from the recorded executions alone: no preparer, nothing unserved."""
    executor = SyntheticExecutor(store)
    backend = RecordingBackend(LocalBackend(executor.run), tmp_path / "executions.jsonl")
    scorer = Scorer([world.adapter], store, backend=backend)
    groups = [
        _group(world, registry, "a", ("correct", "shallow", "wrong", "skip")),
        _group(world, registry, "b", ("skip", "correct", "crash", "wrong")),
    ]
    preparer = Preparer(registry, scorer, capacity=4, threads=False)
    for group in groups:
        preparer.admit(group)
    registry.publish_grader(world.version(1), source="fix")
    preparer.refresh()
    assert preparer.run_pending() > 0
    journal = SealJournal(tmp_path / "seals.jsonl")
    session = SealSession(registry, scorer, "1", prepared=preparer)
    assembly = session.assemble(groups)
    assert assembly.decision.stats["executions"] == 0  # every result came from the preparer
    assert assembly.decision.stats["prepared"].get("ready", 0) > 0
    session.finish(assembly, journal=journal)
    logged = journal.read()
    epochs = registry.epochs()
    members = [m for g in groups for m in g.members]
    report = replay_seals(
        logged,
        bodies={e.version_id: version_to_body(registry.grader(e.version_id)) for e in epochs},
        publications=registry.publications(),
        records={m.member_id: m.execution for m in members if m.execution is not None},
        scores={m.member_id: m.prior for m in members if m.prior is not None},
        recordings=load_recordings(tmp_path / "executions.jsonl"),
        adapters=[world.adapter],
        store=store,
    )
    assert report.ok, report.mismatches + report.unserved
    assert report.replayed[0].rewards() == logged[0].rewards()


def test_the_seal_is_given_no_policy_staleness() -> None:
    """rule: E-SEAL-6 E-SCOPE-1 the policy's staleness is no input of a seal (Reef checks it when
    it hands the buffer out, P-BUF-4): neither a seal nor what it logs as given carries a policy
    version, an artifact or a staleness bound; agent_ecc decides and records labels only, and
    no module of it but the Reef plugin (and the seal its hooks call) imports the trainer."""
    import inspect

    names = set(inspect.signature(SealSession.__init__).parameters)
    names |= set(inspect.signature(SealSession.assemble).parameters)
    names |= {f.name for f in attrs.fields(Given)}
    for word in ("stale", "artifact", "policy_version", "barrier", "release"):
        assert not any(word in name for name in names), (word, names)
    package = Path(agent_ecc.__file__).parent
    importing_reef = set()
    for path in package.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            modules = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(m == "reef" or m.startswith("reef.") for m in modules):
                importing_reef.add(path.relative_to(package).as_posix())
    assert importing_reef == {"reef_plugin.py", "reef_seal.py"}
