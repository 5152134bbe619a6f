"""The ``ecc`` Reef plugin: found through its entry point, it seals job data in the trainer's
``reef_before_submit`` hook under a journal per scenario and rewrites rewards (E-SEAL-2..5, I5,
E-AUDIT-2)."""

from __future__ import annotations

import importlib.metadata
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("reef", reason="the ecc plugin needs reef-core (reef-ecc[reef])")

from agent_ecc import (
    DirectoryRegistry,
    SealJournal,
    consumption_records,
    reef_plugin,
)
from agent_ecc.records import dump_jsonl
from agent_ecc.synthetic import SyntheticWorld
from reef.core.job_data import JobData, JobOutcome, TrajectorySample
from reef.core.plugins import PluginConfigError, Plugins

GROUPS = {
    "g0": ("correct", "skip", "wrong"),
    "g1": ("correct", "infra"),
    "g2": ("crash", "correct"),
}


@pytest.fixture
def plugins() -> Iterator[Plugins]:
    loaded = Plugins(blocked=())
    loaded.load()  # the entry point, as Reef finds it
    yield loaded
    reef_plugin.configure("swe", None)


def _job(world: SyntheticWorld, registry: DirectoryRegistry, tmp_path: Path) -> JobData:
    version = registry.grader("g0")
    samples = []
    for gid, behaviours in GROUPS.items():
        for i, behaviour in enumerate(behaviours):
            record, score = world.produce(version, "t1", f"{gid}m{i}", behaviour)
            dump_jsonl(tmp_path / "records.jsonl", [record])
            dump_jsonl(tmp_path / "scores.jsonl", [score])
            samples.append(
                TrajectorySample(
                    trajectory={"steps": []},
                    reward=1.0 if score.passed else 0.0,
                    metadata={"agent_ecc": {"member_id": record.record_id}},
                    sample_id=f"sample-{gid}-{i}",
                    group_id=gid,
                )
            )
    return JobData(id="swe:data:1", samples=tuple(samples))


def test_entry_point_and_settings() -> None:
    """The plugin is the entry point ``ecc`` of ``reef.plugins``; bad settings name the key."""
    names = {e.name: e.value for e in importlib.metadata.entry_points(group="reef.plugins")}
    assert names["ecc"] == "agent_ecc.reef_plugin"
    with pytest.raises(PluginConfigError, match=r"\$\.ecc\.swe\.mode"):
        reef_plugin.configure(
            "swe",
            {
                "registry": "r",
                "store": "s",
                "journal_dir": "j",
                "records": "a",
                "scores": "b",
                "mode": "fix",
            },
        )


def test_before_submit_seals_and_rewrites_rewards(
    plugins: Plugins,
    registry: DirectoryRegistry,
    world: SyntheticWorld,
    tmp_path: Path,
) -> None:
    """rule: E-SEAL-2, E-SEAL-3, E-SEAL-4, E-SEAL-5, I5, E-AUDIT-2: the job data trains the
    fixed grader's rewards; the group with an infrastructure failure is not submitted; the same
    job data again gets the same committed decision, never a second one; the consumption lines
    written at the job's end match the decision."""
    job = _job(world, registry, tmp_path)
    registry.publish_grader(world.version(1), source="fix")
    untouched = plugins.before_submit("swe", "trainer", job)
    assert untouched is job  # not configured for this scenario: nothing changes
    reef_plugin.configure(
        "swe",
        {
            "registry": str(registry.path),
            "store": str(world.store.root),
            "journal_dir": str(tmp_path / "journals"),
            "records": str(tmp_path / "records.jsonl"),
            "scores": str(tmp_path / "scores.jsonl"),
        },
    )
    sealed = plugins.before_submit("swe", "trainer", job)
    rewards = {s.metadata["agent_ecc"]["member_id"]: s.reward for s in sealed.samples}
    # under g1 a skipped FAIL_TO_PASS test and a crashing run fail; g1 (the infra member's
    # group) is excluded: no gradient under this epoch
    assert rewards == {"g0m0": 1.0, "g0m1": 0.0, "g0m2": 0.0, "g2m0": 0.0, "g2m1": 1.0}
    assert all(isinstance(s, TrajectorySample) for s in sealed.samples)
    again = plugins.before_submit("swe", "trainer", job)
    assert again == sealed
    journal = SealJournal(tmp_path / "journals" / "swe.jsonl")
    assert [d.batch_id for d in journal.read()] == ["swe:data:1"]
    assert journal.read()[0].epoch.index == 1
    outcome = JobOutcome("swe:data:1", "local", "finished")
    plugins.job_ended("swe", "trainer", outcome)
    plugins.job_ended("swe", "trainer", outcome)  # after a restart: the same outcome again
    folder = tmp_path / "journals"
    learner = [json.loads(x) for x in (folder / "swe.learner.jsonl").read_text().splitlines()]
    done = [json.loads(x) for x in (folder / "swe.completions.jsonl").read_text().splitlines()]
    assert len(done) == 1
    report = consumption_records(journal.read(), learner, done)
    assert report.manifest.ok, report.manifest.mismatches


def test_a_deployment_turns_the_seal_on_for_its_scenario(
    plugins: Plugins, registry: DirectoryRegistry, world: SyntheticWorld, tmp_path: Path
) -> None:
    """The deployment's ``scenarios.<name>.extensions.ecc`` is checked when the file is read and
    opens the scenario's seal when the scenario starts; a scenario without it is not sealed."""
    from reef.core.deployment import DeploymentError, load_deployment, scenario_classes

    ecc = {
        "registry": str(registry.path),
        "store": str(world.store.root),
        "journal_dir": str(tmp_path / "journals"),
        "records": str(tmp_path / "records.jsonl"),
        "scores": str(tmp_path / "scores.jsonl"),
    }
    text = json.dumps(
        {
            "scenarios": {
                "swe": {"recipe": "sft", "extensions": {"ecc": ecc}},
                "chat": {"recipe": "sft"},
            }
        }
    ).replace(
        '"recipe": "sft"',
        '"recipe": "sft", "pipeline": {"sample2job": {"config": {"job_samples": 2}}}',
    )
    deployment = load_deployment(text, plugins=plugins)
    for name, section in deployment.scenarios.items():
        classes = scenario_classes(name, section, plugins)
        assert classes is not None
        plugins.scenario_started(name, classes.extensions)
    assert reef_plugin.configured("swe") is not None
    assert reef_plugin.configured("chat") is None
    bad = text.replace('"mode"', '"x"').replace('"journal_dir"', '"journal_dri"')
    with pytest.raises(DeploymentError, match=r"did you mean 'journal_dir'\?"):
        load_deployment(bad, plugins=plugins)
