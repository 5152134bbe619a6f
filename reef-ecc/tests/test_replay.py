"""The replay of section 7 on agent-ecc's own logs (E-REPLAY-1..5), with its sensitivity checks."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import attrs
import pytest

from agent_ecc import ContentStore, DirectoryRegistry, SealJournal, load_recordings
from agent_ecc.adapters.swebench import SWEBenchAdapter
from agent_ecc.codec import from_json, to_json
from agent_ecc.records import ExecutionRecord, RecordedScore, load_jsonl
from agent_ecc.replay import replay_seals
from agent_ecc.seal import Decision
from agent_ecc.versions import version_to_body

EXAMPLE = Path(__file__).parents[1] / "examples" / "lifecycle" / "run.py"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spec = importlib.util.spec_from_file_location("ecc_lifecycle", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path_factory.mktemp("run")
    module.run(out)
    return out


def _inputs(run_dir: Path) -> dict[str, Any]:
    registry = DirectoryRegistry(run_dir / "registry")
    records = {r.record_id: r for r in load_jsonl(run_dir / "records.jsonl", ExecutionRecord)}
    scores = {s.record_id: s for s in load_jsonl(run_dir / "scores.jsonl", RecordedScore)}
    bodies = {
        e.version_id: version_to_body(registry.grader(e.version_id)) for e in registry.epochs()
    }
    return {
        "bodies": bodies,
        "publications": registry.publications(),
        "records": records,
        "scores": scores,
        "recordings": load_recordings(run_dir / "executions.jsonl"),
        "adapters": [SWEBenchAdapter()],
        "store": ContentStore(run_dir / "store"),
    }


def test_replay_reproduces_every_seal(run_dir: Path) -> None:
    """rule: E-REPLAY-2, E-REPLAY-3: zero mismatches, no execution the run did not make."""
    logged = SealJournal(run_dir / "seals.jsonl").read()
    report = replay_seals(logged, **_inputs(run_dir))
    assert report.mismatches == ()
    assert report.unserved == ()
    assert len(report.replayed) == len(logged) == 6


def _scramble(decision: Decision) -> Decision:
    flipped = {"pass": "fail", "fail": "pass"}
    members = tuple(
        attrs.evolve(m, label=flipped.get(m.label or "", m.label), reward=None, type="reuse")
        for m in decision.members
    )
    return attrs.evolve(
        decision, members=members, groups=(), epoch=attrs.evolve(decision.epoch, index=99)
    )


def test_scrambled_decisions_replay_the_same(run_dir: Path) -> None:
    """rule: E-REPLAY-1, E-REPLAY-4: the decided part of a log is never an input."""
    logged = SealJournal(run_dir / "seals.jsonl").read()
    scrambled = [from_json(Decision, json.loads(json.dumps(to_json(_scramble(d))))) for d in logged]
    clean = replay_seals(logged, **_inputs(run_dir))
    again = replay_seals(scrambled, **_inputs(run_dir))
    assert [to_json(d.members) for d in again.replayed] == [
        to_json(d.members) for d in clean.replayed
    ]
    assert again.mismatches  # the scrambled log disagrees with what its inputs decide


def test_a_changed_verdict_rule_is_detected(run_dir: Path) -> None:
    """rule: E-REPLAY-4, E-REPLAY-5: a body graded by another rule than it names is refused."""
    inputs = _inputs(run_dir)
    body = inputs["bodies"]["g1"]
    body["entries"][0]["spec"]["check"]["grading"]["rule"] = "official"
    report = replay_seals(SealJournal(run_dir / "seals.jsonl").read(), **inputs)
    assert not report.ok
    assert "grading identity" in report.mismatches[0]


def test_a_moved_publication_time_is_detected(run_dir: Path) -> None:
    """rule: E-REPLAY-4: g1 published after the seals that read it makes their epochs differ."""
    inputs = _inputs(run_dir)
    moved = [
        attrs.evolve(
            p,
            published_at=p.published_at + 3600,
            epoch=attrs.evolve(p.epoch, published_at=p.published_at + 3600),
        )
        if p.kind == "grader" and p.epoch.index == 1
        else p
        for p in inputs["publications"]
    ]
    inputs["publications"] = moved
    report = replay_seals(SealJournal(run_dir / "seals.jsonl").read(), **inputs)
    assert any("epoch 1 logged, 0 replayed" in m for m in report.mismatches)
