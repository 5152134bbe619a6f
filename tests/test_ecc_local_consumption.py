"""Agent ECC with the real local component: what the loss consumed is what the journal traces.

Job data is sealed by the ``ecc`` plugin (rewards rewritten under the fixed grader's epoch),
trained by :class:`~reef.components.local.component.LocalComponent` with the importance-sampling
objective, and its outcome handed to ``reef_job_ended``: the consumption lines come from the
component's own report (one per sample and step), the sample the component could not render has
no line, and every line matches the seal decision (E-AUDIT-1, E-AUDIT-2).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("agent_ecc")

from agent_ecc import DirectoryRegistry, SealJournal, consumption_records, reef_plugin
from agent_ecc.records import dump_jsonl
from agent_ecc.store import ContentStore
from agent_ecc.synthetic import SyntheticWorld
from reef.components.local.component import LocalComponent
from reef.core.job_data import JobData, TrajectorySample
from reef.plugins import Plugins

GROUPS = {"g0": ("correct", "skip", "wrong"), "g1": ("crash", "correct")}


def trajectory(reply: str) -> dict[str, Any]:
    return {
        "schema_version": "ATIF-v1.8",
        "agent": {"name": "swe", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": "fix the bug"},
            {"step_id": 2, "source": "agent", "message": reply},
        ],
    }


@pytest.fixture
def plugins() -> Plugins:
    loaded = Plugins(blocked=())
    loaded.load()
    return loaded  # the seals live on its ecc plugin: nothing to reset afterwards


def test_the_journal_traces_what_the_local_components_loss_consumed(
    plugins: Plugins, tmp_path: Path
) -> None:
    """rule: E-AUDIT-1, E-AUDIT-2"""
    world = SyntheticWorld(ContentStore(tmp_path / "store"), ("t1",))
    registry = DirectoryRegistry(tmp_path / "registry")
    registry.publish_grader(world.version(0), source="startup")
    registry.publish_world(world.world(), source="startup")
    samples = []
    for group, behaviours in GROUPS.items():
        for position, behaviour in enumerate(behaviours):
            record, score = world.produce(
                registry.grader("g0"), "t1", f"{group}m{position}", behaviour
            )
            dump_jsonl(tmp_path / "records.jsonl", [record])
            dump_jsonl(tmp_path / "scores.jsonl", [score])
            # One reply is far longer than the model reads: the component cannot train it.
            reply = "x" * 400 if (group, position) == ("g1", 1) else f"patch {group}{position}"
            samples.append(
                TrajectorySample(
                    trajectory(reply),
                    reward=1.0 if score.passed else 0.0,
                    metadata={"agent_ecc": {"member_id": record.record_id}},
                    sample_id=f"sample-{group}-{position}",
                    group_id=group,
                )
            )
    registry.publish_grader(world.version(1), source="fix")
    ecc = plugins.plugin("ecc")
    assert isinstance(ecc, reef_plugin.EccPlugin)
    ecc.configure(
        "swe",
        {
            "registry": str(registry.path),
            "store": str(world.store.root),
            "journal_dir": str(tmp_path / "journals"),
            "records": str(tmp_path / "records.jsonl"),
            "scores": str(tmp_path / "scores.jsonl"),
        },
    )
    sealed = plugins.before_submit("swe", "trainer", JobData("swe:data:1", tuple(samples)))
    assert sealed is not None
    local = LocalComponent.from_config(
        {
            "state_dir": str(tmp_path / "local"),
            "d_model": 32,
            "n_layers": 1,
            "n_heads": 2,
            "max_seq_len": 96,
            "batch_size": 2,
        }
    )
    try:
        parameters = {"objective": "importance_sampling"}
        outcome = local.wait(local.submit(sealed, parameters), timeout=120)
    finally:
        local.close()
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics["unrenderable_samples"] == 1
    plugins.job_ended("swe", "trainer", outcome)

    folder = tmp_path / "journals"
    learner = [json.loads(x) for x in (folder / "swe.learner.jsonl").read_text().splitlines()]
    done = [json.loads(x) for x in (folder / "swe.completions.jsonl").read_text().splitlines()]
    report = consumption_records(SealJournal(folder / "swe.jsonl").read(), learner, done)
    assert report.manifest.ok, report.manifest.mismatches
    trained = {s.metadata["agent_ecc"]["member_id"]: s for s in sealed.samples}
    unrendered = next(s for s in sealed.samples if s.sample_id == "sample-g1-1")
    expected = set(trained) - {unrendered.metadata["agent_ecc"]["member_id"]}
    assert {line["member_id"] for line in learner} == expected
    assert all(line["reporter"] == "local" and line["loss_tokens"] > 0 for line in learner)
    assert {line["microbatch"] for line in learner} == set(range(outcome.metrics["steps"]))
    (step,) = report.records
    assert {r.member_id for r in step.records} == expected
