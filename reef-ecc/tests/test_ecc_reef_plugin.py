"""The ``ecc`` Reef plugin: found through its entry point, it seals job data in the trainer's
``reef_before_submit`` hook under a journal per scenario and rewrites rewards (E-SEAL-2..5, I5,
E-AUDIT-2)."""

from __future__ import annotations

import importlib.metadata
import json
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("reef", reason="the ecc plugin needs reef-core (reef-ecc[reef])")

from agent_ecc import (
    DirectoryRegistry,
    SealJournal,
    consumption_records,
    reef_plugin,
)
from agent_ecc.adapters.swebench import DEFAULT_RULE, SWEBenchAdapter, conjunction_version
from agent_ecc.execution import ExecRequest, RawOutput
from agent_ecc.recompute.service import ReverifyService
from agent_ecc.records import Run, dump_jsonl
from agent_ecc.store import get_text, put_text
from agent_ecc.synthetic import SyntheticExecutor, SyntheticWorld, synthetic_patch
from reef.core.job_data import JobData, JobOutcome, TrajectorySample, sample_body
from reef.core.plugins import PluginConfigError
from reef.plugins import Plugins

GROUPS = {
    "g0": ("correct", "skip", "wrong"),
    "g1": ("correct", "infra"),
    "g2": ("crash", "correct"),
}


@pytest.fixture
def plugins() -> Plugins:
    loaded = Plugins(blocked=())
    loaded.load()  # the entry point, as Reef finds it
    return loaded  # the seals live on its ecc plugin: nothing to reset afterwards


def ecc_plugin(plugins: Plugins) -> reef_plugin.EccPlugin:
    """The ``ecc`` plugin that ``plugins`` made from the entry point."""
    plugin = plugins.plugin("ecc")
    assert isinstance(plugin, reef_plugin.EccPlugin)
    return plugin


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


def _settings(
    registry: DirectoryRegistry, world: SyntheticWorld, tmp_path: Path, **extra: Any
) -> dict[str, Any]:
    """The seal's settings for ``swe``, its files under ``tmp_path``."""
    return {
        "registry": str(registry.path),
        "store": str(world.store.root),
        "journal_dir": str(tmp_path / "journals"),
        "records": str(tmp_path / "records.jsonl"),
        "scores": str(tmp_path / "scores.jsonl"),
        **extra,
    }


def test_entry_point_and_settings() -> None:
    """The plugin is the entry point ``ecc`` of ``reef.plugins``; bad settings name the key."""
    names = {e.name: e.value for e in importlib.metadata.entry_points(group="reef.plugins")}
    assert names["ecc"] == "agent_ecc.reef_plugin:EccPlugin"
    with pytest.raises(PluginConfigError, match=r"\$\.ecc\.swe\.mode"):
        reef_plugin.EccPlugin().configure(
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


def test_the_plugin_the_adapter_and_the_versions_have_one_default_rule(
    plugins: Plugins, registry: DirectoryRegistry, world: SyntheticWorld, tmp_path: Path
) -> None:
    """Configured without ``verdict``, the plugin grades with the adapter's default rule, which
    conjunction_version writes into every check: official, under which a run whose executor
    stopped is a fail (as SWE-bench reports it), where logical would leave it undeterminable."""
    ecc_plugin(plugins).configure("swe", _settings(registry, world, tmp_path))
    seal = ecc_plugin(plugins).configured("swe")
    assert seal is not None
    graded_by = seal.scorer.adapters["swebench"]
    assert isinstance(graded_by, SWEBenchAdapter)
    assert graded_by.verdict == SWEBenchAdapter().verdict == DEFAULT_RULE == "official"
    suite = {"FAIL_TO_PASS": ["t.py::a"], "PASS_TO_PASS": []}
    row = {
        "instance_id": "x",
        "repo": "example/x",
        "version": "1",
        "image": "i",
        "eval_script": put_text(world.store, "true"),
        "log_parser": "parse_log_pytest",
        "eval_type": "pass_and_fail",
    }
    version = conjunction_version(
        [{**row, **suite}],
        [],
        version_id="g",
        world="w",
        store=world.store,
        adapter=SWEBenchAdapter(),
    )
    assert version.entries[0].spec.grading["rule"] == "official"  # type: ignore[union-attr]
    unnamed = SWEBenchAdapter().check("c", image="i", eval_script="e", suite=suite)
    assert "rule" not in unnamed.grading  # the grader's default decides
    stopped = Run("c", unnamed.execution, unnamed.execution_identity, None, False, error="gone")
    assert graded_by.grade(unnamed, stopped, world.store) == "fail"
    assert SWEBenchAdapter("logical").grade(unnamed, stopped, world.store) == "undeterminable"


def test_two_plugins_in_one_process_keep_their_own_seals(
    registry: DirectoryRegistry, world: SyntheticWorld, tmp_path: Path
) -> None:
    """Each Plugins makes its own ecc plugin from the entry point: a seal one of them configures
    is not seen, used or shown by the other (no state shared through the module)."""
    first, second = Plugins(blocked=()), Plugins(blocked=())
    first.load()
    second.load()
    assert ecc_plugin(first) is not ecc_plugin(second)
    ecc_plugin(first).configure("swe", _settings(registry, world, tmp_path))
    assert ecc_plugin(second).configured("swe") is None
    job = _job(world, registry, tmp_path)
    registry.publish_grader(world.version(1), source="fix")
    assert second.before_submit("swe", "trainer", job) is job
    assert second.scenario_status("swe") == {}
    assert first.before_submit("swe", "trainer", job) is not job
    assert set(first.scenario_status("swe")) == {"ecc"}


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
    ecc_plugin(plugins).configure("swe", _settings(registry, world, tmp_path))
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


def _seal(
    plugins: Plugins, registry: DirectoryRegistry, world: SyntheticWorld, tmp_path: Path
) -> JobData:
    job = _job(world, registry, tmp_path)
    registry.publish_grader(world.version(1), source="fix")
    ecc_plugin(plugins).configure("swe", _settings(registry, world, tmp_path))
    sealed: JobData = plugins.before_submit("swe", "trainer", job)
    return sealed


def _consumption(tmp_path: Path) -> tuple[list[dict[str, Any]], Any]:
    folder = tmp_path / "journals"
    learner = [json.loads(x) for x in (folder / "swe.learner.jsonl").read_text().splitlines()]
    done = [json.loads(x) for x in (folder / "swe.completions.jsonl").read_text().splitlines()]
    journal = SealJournal(folder / "swe.jsonl")
    return learner, consumption_records(journal.read(), learner, done)


def test_consumption_lines_follow_what_the_components_loss_consumed(
    plugins: Plugins, registry: DirectoryRegistry, world: SyntheticWorld, tmp_path: Path
) -> None:
    """rule: E-AUDIT-1, E-AUDIT-2: with the component's report (the ``consumed`` metric), a
    line per sample and step, with its micro-batch, loss tokens and the reward the loss used,
    traced to its member through the hand-off; a sample the component left out has none."""
    sealed = _seal(plugins, registry, world, tmp_path)
    trained, left_out = sealed.samples[:-1], sealed.samples[-1]
    consumed = [
        {
            "sample_id": s.sample_id,
            "step": position // 2,
            "loss_tokens": 10 + position,
            "reward": s.reward,
            "advantage": 0.25,
        }
        for position, s in enumerate(trained)
    ]
    outcome = JobOutcome(sealed.id, "local", "finished", metrics={"consumed": consumed})
    plugins.job_ended("swe", "trainer", outcome)
    learner, report = _consumption(tmp_path)
    assert report.manifest.ok, report.manifest.mismatches
    members = [s.metadata["agent_ecc"]["member_id"] for s in trained]
    assert [line["member_id"] for line in learner] == members
    assert left_out.metadata["agent_ecc"]["member_id"] not in {m["member_id"] for m in learner}
    assert [line["microbatch"] for line in learner] == [p // 2 for p in range(len(trained))]
    assert [line["loss_tokens"] for line in learner] == [10 + p for p in range(len(trained))]
    assert {line["reporter"] for line in learner} == {"local"}
    (step,) = report.records
    assert [r.member_id for r in step.records] == members
    assert [r.microbatch for r in step.records] == [p // 2 for p in range(len(trained))]


def test_a_reward_changed_between_the_seal_and_the_loss_is_a_mismatch(
    plugins: Plugins, registry: DirectoryRegistry, world: SyntheticWorld, tmp_path: Path
) -> None:
    """rule: E-AUDIT-2: the line carries the reward the loss trained with, so the manifest
    catches a sample whose reward was changed after its seal."""
    sealed = _seal(plugins, registry, world, tmp_path)
    changed = sealed.samples[0]
    assert changed.reward is not None
    consumed = [
        {
            "sample_id": s.sample_id,
            "step": 0,
            "loss_tokens": 5,
            "reward": 1.0 - changed.reward if s is changed else s.reward,
        }
        for s in sealed.samples
    ]
    outcome = JobOutcome(sealed.id, "local", "finished", metrics={"consumed": consumed})
    plugins.job_ended("swe", "trainer", outcome)
    _, report = _consumption(tmp_path)
    assert not report.manifest.ok
    member = changed.metadata["agent_ecc"]["member_id"]
    assert report.manifest.mismatches == (
        f"batch {sealed.id} member {member}: trained reward {1.0 - changed.reward},"
        f" decided {changed.reward}",
    )


def test_a_deployment_turns_the_seal_on_for_its_scenario(
    plugins: Plugins, registry: DirectoryRegistry, world: SyntheticWorld, tmp_path: Path
) -> None:
    """The deployment's ``scenarios.<name>.extensions.ecc`` is checked when the file is read and
    opens the scenario's seal when the scenario starts; a scenario without it is not sealed."""
    from reef.core.deployment import DeploymentError
    from reef.plugins.scenarios import load_deployment, scenario_classes

    ecc = _settings(registry, world, tmp_path)
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
    assert ecc_plugin(plugins).configured("swe") is not None
    assert ecc_plugin(plugins).configured("chat") is None
    bad = text.replace('"mode"', '"x"').replace('"journal_dir"', '"journal_dri"')
    with pytest.raises(DeploymentError, match=r"did you mean 'journal_dir'\?"):
        load_deployment(bad, plugins=plugins)


class GatedExecutor(SyntheticExecutor):
    """Runs the synthetic world's checks, holding every run of one patch until ``gate`` opens
    (a re-execution still under way when the seal's deadline passes)."""

    def __init__(self, world: SyntheticWorld, held_patch: str) -> None:
        super().__init__(world.store)
        self.held_patch = held_patch
        self.gate = threading.Event()
        self.released = threading.Event()
        self.network = "none"

    def run(self, request: ExecRequest) -> RawOutput:
        if get_text(self.store, request.patch) == self.held_patch:
            self.gate.wait(60)
            try:
                return super().run(request)
            finally:
                self.released.set()
        return super().run(request)


def test_unused_groups_come_back_in_the_next_job_and_status_shows_the_seal(
    plugins: Plugins, registry: DirectoryRegistry, world: SyntheticWorld, tmp_path: Path
) -> None:
    """rule: E-SEAL-3, E-SEAL-5, I5: through Reef's pipeline, the seal hands over the decided
    group, retires the excluded one (consumed, never submitted) and gives the unused one (its
    re-execution still running at the deadline) back to the buffer; the next job takes it,
    under a batch id of its own, and trains its rewards under the epoch in force. The scenario
    status shows that epoch and the last seal."""
    from reef.pipeline_context import PipelineContext
    from reef.recipe.grouped.processor import GroupedJobData
    from reef.record2sample.no_samples import NoSamples
    from reef.storage import NewSample, TrainerSamples, open_database
    from reef.train.pipeline import TrainingPipeline

    version = registry.grader("g0")
    # store order: the unused group first (its sample starts the next job too), then the
    # decided one, then one with a member the producers never recorded (undeterminable)
    groups = {"late": ("t2", ("correct", "wrong")), "done": ("t1", ("wrong", "skip")),
              "lost": ("t1", ("wrong", "correct"))}  # fmt: skip
    database = open_database(f"sqlite:///{tmp_path / 'reef.db'}")
    samples = TrainerSamples(database, "swe")
    context = PipelineContext("swe", "c")
    pipeline = TrainingPipeline(
        NoSamples(context),
        GroupedJobData(context, job_samples=2, buffer_size=10),
        samples=samples,
        context=context,
    )
    for gid, (task, behaviours) in groups.items():
        unit = []
        for i, behaviour in enumerate(behaviours):
            record, score = world.produce(version, task, f"{gid}{i}", behaviour)
            if (gid, i) != ("lost", 1):
                dump_jsonl(tmp_path / "records.jsonl", [record])
                dump_jsonl(tmp_path / "scores.jsonl", [score])
            sample = TrajectorySample(
                {"steps": []},
                reward=1.0 if score.passed else 0.0,
                metadata={"agent_ecc": {"member_id": record.record_id}},
            )
            unit.append(NewSample(f"{gid}-{i}", "trajectory", sample_body(sample)))
        samples.add_record_samples("c", unit, [f"record-{gid}"])
    registry.publish_grader(world.version(2), source="hardened")  # needs re-executions
    executor = GatedExecutor(world, synthetic_patch("t2", "correct"))
    service = ReverifyService(world.store, executor=executor, capacity=4).start()  # type: ignore[arg-type]
    try:
        ecc_plugin(plugins).configure(
            "swe", _settings(registry, world, tmp_path, service=service.url, deadline_s=0.5)
        )
        first = pipeline.build_job_data(2)
        assert first is not None
        sealed = plugins.before_submit("swe", "c", first)
        assert [s.sample_id for s in sealed.samples] == ["done-0", "done-1"]
        assert sealed.given_back == ("late-0", "late-1")
        # what the job history keeps of the seal: the epoch, and each sample's fate
        provenance = plugins.job_provenance("swe", "c", sealed)["ecc"]
        assert provenance["job"]["epoch"] == {"index": 1, "version_id": "g2"}
        fates = {k: (v["outcome"], v.get("verdict")) for k, v in provenance["samples"].items()}
        assert {k: outcome for k, (outcome, _) in fates.items()} == {
            "done-0": "batch", "done-1": "batch", "lost-0": "excluded", "lost-1": "excluded",
            "late-0": "unused", "late-1": "unused",
        }  # fmt: skip
        assert fates["done-0"][1] == "fail"  # the hardened grader's verdict of a wrong patch
        assert provenance["samples"]["done-0"]["reward"] == 0.0
        assert plugins.job_provenance("swe", "c", first) == {"ecc": provenance}
        pipeline.acknowledge(sealed.id, given_back=sealed.given_back)
        # the decided group trained, the excluded one is retired, the unused one waits
        counts = samples.train_counts("c", [f"{g}-{i}" for g in groups for i in range(2)])
        assert {k for k, v in counts.items() if v} == {"done-0", "done-1", "lost-0", "lost-1"}
        executor.gate.set()
        assert executor.released.wait(30)
        second = pipeline.build_job_data(2)
        assert second is not None
        assert second.id == f"{first.id}.1"  # a batch id of its own: the journal decides once
        resealed = plugins.before_submit("swe", "c", second)
        # the history of the first job is not the second's
        assert plugins.job_provenance("swe", "c", first) == {}
        rewards = {s.sample_id: s.reward for s in resealed.samples}
        assert rewards == {"late-0": 1.0, "late-1": 0.0}
        assert resealed.given_back == ()
        pipeline.acknowledge(resealed.id, given_back=resealed.given_back)
        assert pipeline.build_job_data(2) is None
        status: dict[str, Any] = plugins.scenario_status("swe")
    finally:
        service.close()
        database.dispose()
    journal = SealJournal(tmp_path / "journals" / "swe.jsonl")
    assert [d.batch_id for d in journal.read()] == [first.id, second.id]
    last = journal.read()[-1]
    # g2 is the second grader published: epoch 1
    assert status == {
        "ecc": {
            "epoch": {"index": 1, "version_id": "g2"},
            "infra_fails": 0,
            "last_seal": {
                "batch_id": second.id,
                "epoch": {"index": 1, "version_id": "g2"},
                "stats": last.stats,
                "shortfall": 0,
                "groups": {"batch": 1},
                "failed": None,
            },
        }
    }
    # after a restart the last seal is read back from the journal
    ecc_plugin(plugins).configure("swe", ecc_plugin(plugins).configured("swe").settings)  # type: ignore[union-attr]
    assert plugins.scenario_status("swe")["ecc"]["last_seal"]["batch_id"] == second.id


def test_status_counts_members_failed_by_infrastructure_across_restarts(
    plugins: Plugins, registry: DirectoryRegistry, world: SyntheticWorld, tmp_path: Path
) -> None:
    """rule: E-GRADE-4: a member whose only fail is an infrastructure failure graded as a fail
    (its recorded verdict under g0, reused) is counted in the scenario's status, in the last
    seal's stats and in a total that survives a restart."""
    job = _job(world, registry, tmp_path)  # g1's second member: the executor stopped
    ecc_plugin(plugins).configure("swe", _settings(registry, world, tmp_path))
    sealed = plugins.before_submit("swe", "trainer", job)
    rewards = {s.metadata["agent_ecc"]["member_id"]: s.reward for s in sealed.samples}
    assert rewards["g1m1"] == 0.0
    status = plugins.scenario_status("swe")["ecc"]
    assert status["infra_fails"] == 1
    assert status["last_seal"]["stats"]["infra_fails"] == 1
    ecc_plugin(plugins).configure("swe", ecc_plugin(plugins).configured("swe").settings)  # type: ignore[union-attr]
    assert plugins.scenario_status("swe")["ecc"]["infra_fails"] == 1
