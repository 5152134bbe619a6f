"""The journal's crash safety, consumption records and the lifecycle example."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from agent_ecc import (
    Candidate,
    ContentStore,
    DirectoryRegistry,
    Member,
    Scorer,
    SealJournal,
    SealSession,
    consumption_records,
)
from agent_ecc.synthetic import SyntheticWorld

EXAMPLE = Path(__file__).parents[1] / "examples" / "lifecycle" / "run.py"


def _decision(registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore, batch: str):
    version = registry.grader("g0")
    record, score = world.produce(version, "t1", f"{batch}m0", "correct")
    candidate = Candidate(f"{batch}g", None, (Member(record.record_id, record, score, 1.0),))
    session = SealSession(registry, Scorer([world.adapter], store), batch)
    return session.assemble([candidate]).decision


def test_torn_tail_and_uncommitted_decisions_are_ignored(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore, tmp_path: Path
) -> None:
    """rule: E-SEAL-5: a crash mid-append leaves no half decision; the next append cuts it off."""
    journal = SealJournal(tmp_path / "seals.jsonl")
    journal.append(_decision(registry, world, store, "1"))
    whole = journal.path.read_bytes()
    lines = whole.splitlines(keepends=True)
    # a crash between the decision's fsync and the commit, then a torn line
    journal.path.write_bytes(whole + lines[0].replace(b'"1"', b'"2"') + lines[0][:40])
    assert [d.batch_id for d in journal.read()] == ["1"]
    journal.append(_decision(registry, world, store, "3"))
    assert [d.batch_id for d in journal.read()] == ["1", "3"]
    assert all(line.endswith(b"\n") for line in journal.path.read_bytes().splitlines(keepends=True))
    assert [e["kind"] for e in journal.entries()] == [
        "decision",
        "commit",
        "decision",
        "decision",
        "commit",
    ]


def test_consumption_records_match_decisions(
    registry: DirectoryRegistry, world: SyntheticWorld, store: ContentStore
) -> None:
    """rule: E-AUDIT-1, E-AUDIT-2: ok iff every consumed line matches its seal decision."""
    decision = _decision(registry, world, store, "7")
    line = {
        "batch_id": "7",
        "member_id": "7m0",
        "group_id": "7g",
        "step": 7,
        "reward": 1.0,
        "identity": "verified",
    }
    done = [{"batch_id": "7", "step": 7, "ok": True}]
    report = consumption_records([decision], [line], done)
    assert report.manifest.ok
    assert report.records[0].records[0].record_id == "7m0"
    assert report.records[0].epoch.index == 0
    bad = consumption_records([decision], [{**line, "reward": 0.0}], done)
    assert not bad.manifest.ok
    assert "trained reward" in bad.manifest.mismatches[0]
    orphan = consumption_records([], [line], done)
    assert "no committed seal decision" in orphan.manifest.mismatches[0]


def test_lifecycle_example_runs(tmp_path: Path) -> None:
    """rule: E-AUDIT-2, E-AUDIT-3, E-AUDIT-4: the whole lifecycle on synthetic data."""
    out = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    summary = json.loads(out.stdout)
    assert summary["manifest_ok"]
    assert summary["epochs_ok"]
    assert summary["conflicts"] == 0
    assert [s["epoch"] for s in summary["steps"]] == [0, 0, 1, 1, 2, 2]
    assert summary["steps"][2]["executions"] == 0  # the 4.1 fix needs no execution: re-parse
    assert summary["executed"] > 0
