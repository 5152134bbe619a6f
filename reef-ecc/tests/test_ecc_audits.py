"""The two audits find what they exist to find: a seal whose epoch went back (``audit_epochs``,
I3) and identical executions graded both ways under one grading identity
(``verdict_conflicts``). The clean runs of the guides only show that they find nothing where
there is nothing; a mutant that made either audit blind passed them all."""

from __future__ import annotations

import runpy
from pathlib import Path

import attrs

from agent_ecc import (
    ContentStore,
    DirectoryRegistry,
    SealJournal,
    audit_epochs,
    verdict_conflicts,
)
from agent_ecc.synthetic import SyntheticWorld

LIFECYCLE = Path(__file__).parents[1] / "examples" / "lifecycle" / "run.py"


def test_audit_epochs_finds_an_epoch_that_goes_back(tmp_path: Path) -> None:
    """rule: E-AUDIT-3 -- the lifecycle's seals, read in commit order, pass; the same seals
    with a later one committed first break I3, and only I3: each still read the epoch in
    force."""
    runpy.run_path(str(LIFECYCLE))["run"](tmp_path)
    decisions = SealJournal(tmp_path / "seals.jsonl").read()
    registry = DirectoryRegistry(tmp_path / "registry")
    assert [d.epoch.index for d in decisions] == [0, 0, 1, 1, 2, 2]
    assert audit_epochs(decisions, registry).ok
    swapped = [decisions[2], decisions[0], *decisions[3:]]
    audit = audit_epochs(swapped, registry)
    assert not audit.ok
    assert audit.unexpected == (f"batch {decisions[0].batch_id}: epoch 0 after epoch 1 (I3)",)


def test_audit_epochs_finds_a_seal_that_did_not_read_the_epoch_in_force(tmp_path: Path) -> None:
    """rule: E-AUDIT-3 -- I4: a seal whose pointer read names an epoch the publication log did
    not have in force at that moment, and an unpinned seal sealed under another epoch than the
    one it read, are each reported (a mutant that dropped either check passed the suite)."""
    runpy.run_path(str(LIFECYCLE))["run"](tmp_path)
    decisions = SealJournal(tmp_path / "seals.jsonl").read()
    registry = DirectoryRegistry(tmp_path / "registry")
    early, later = decisions[0], decisions[2]
    assert (early.epoch.index, later.epoch.index) == (0, 1)
    # The later seal claims it read epoch 1 at the moment the early one read epoch 0.
    back = attrs.evolve(later.given.pointer, read_at=early.given.pointer.read_at)
    misread = attrs.evolve(later, given=attrs.evolve(later.given, pointer=back))
    audit = audit_epochs([early, misread], registry)
    assert not audit.ok
    assert audit.unexpected == (
        f"batch {later.batch_id}: pointer read at {early.given.pointer.read_at} named epoch 1,"
        " the log says 0 (I4)",
    )
    # The later seal read epoch 1 in force but sealed under epoch 0, unpinned.
    resealed = attrs.evolve(later, epoch=early.epoch)
    audit = audit_epochs([early, resealed], registry)
    assert audit.unexpected == (f"batch {later.batch_id}: sealed under epoch 0, read 1 (I4)",)


def test_verdict_conflicts_finds_one_execution_graded_both_ways(tmp_path: Path) -> None:
    """rule: E-AUDIT-4 -- a record graded pass, and a recorded score of the same execution
    under the same grading identity that says fail: one conflict, naming the request, the
    identity and the record."""
    store = ContentStore(tmp_path / "store")
    world = SyntheticWorld(store, ("t1",))
    version = world.version(0)
    record, recorded = world.produce(version, "t1", "a0", "correct")
    assert recorded.verdict == "pass"
    assert verdict_conflicts([record], [recorded], [version], [world.adapter], store) == []
    flipped = attrs.evolve(
        recorded,
        verdict="fail",
        checks=tuple(attrs.evolve(check, verdict="fail") for check in recorded.checks),
    )
    (conflict,) = verdict_conflicts([record], [flipped], [version], [world.adapter], store)
    assert conflict.records == ("a0",)
    assert conflict.grading_identity == recorded.checks[0].grading_identity
    # An undeterminable verdict is no conflict.
    unknown = attrs.evolve(
        recorded,
        checks=tuple(attrs.evolve(check, verdict="undeterminable") for check in recorded.checks),
    )
    assert verdict_conflicts([record], [unknown], [version], [world.adapter], store) == []
