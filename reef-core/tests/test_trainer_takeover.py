"""What a trainer that takes over from a dead one (or restarts) keeps of staleness: it first
observes what its predecessor served, so data made under those artifacts keeps its age, and when
it serves the same weights (the same content hash is the same artifact) nothing ages at all.
And what ``reef status`` shows of the samples held out as stale. Real :class:`Trainer` threads
on SQLite (and PostgreSQL with REEF_TEST_DATABASE_URL)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from reef.components.interface import Artifact, JobHandle
from reef.core.job_data import JobOutcome, TrajectorySample, sample_body
from reef.pipeline_context import PipelineContext
from reef.recipe.grouped.processor import GroupedJobData
from reef.record2sample.no_samples import NoSamples
from reef.storage import Database, NewSample, ScenarioSettings, TrainerSamples
from reef.storage.scenario_settings import snapshot_key
from reef.testing.components import RecordingComponent, train_until_submitted
from reef.train.pipeline import TrainingPipeline
from reef.train.trainer import TrainerParts


class PublishingComponent(RecordingComponent):
    """Publishes ``art-<n>``: ``n`` is ``start`` plus the jobs it finished."""

    def __init__(self, expected_jobs: int, *, start: int = 0) -> None:
        super().__init__(expected_jobs)
        self.count = start
        self._lock = threading.Lock()

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        with self._lock:
            self.count += 1
        return JobOutcome(handle.job_id, self.name, "finished")

    def publish(self) -> Artifact:
        with self._lock:
            return Artifact(f"art-{self.count}", Path("."))


def store_made_under(database: Database, groups: dict[str, str]) -> TrainerSamples:
    """Two samples per group, made under the artifact given for the group."""
    samples = TrainerSamples(database, "s")
    samples.register_trainer("c", reads_uploads=False)
    for group, artifact in groups.items():
        trajectory = {"steps": [], "extra": {"reef": {"records": [{"artifact_id": artifact}]}}}
        unit = [
            NewSample(f"{group}-{i}", "trajectory", sample_body(TrajectorySample(trajectory)))
            for i in range(2)
        ]
        samples.add_record_samples("c", unit, [f"record-{group}"])
    return samples


def tenure(database: Database, component: RecordingComponent) -> list[list[str]]:
    """Run a trainer (max_staleness 1, jobs of one group) until ``component`` got its jobs,
    stop it cleanly; the sample ids of each job."""

    def build(fenced: Database) -> TrainerParts:
        context = PipelineContext("s", "c", has_runtime_loader=True)
        pipeline = TrainingPipeline(
            NoSamples(context, max_staleness=1),
            GroupedJobData(context, job_samples=2, buffer_size=2),
            samples=TrainerSamples(fenced, "s"),
            context=context,
        )
        return TrainerParts(pipeline, component)

    train_until_submitted(database, component, build)
    return [[str(s.sample_id) for s in data.samples] for data in component.submitted]


def test_a_new_tenure_keeps_the_age_of_what_its_predecessor_served(
    storage_database: Database,
) -> None:
    """rule: P-STALE-5 P-STALE-6 -- the first tenure serves art-0, trains g1 and publishes
    art-1. The next tenure serves art-1 too (the same weights): g2, made under art-0, is one
    artifact behind, within max_staleness 1, and trains. Had the new tenure seen only its own
    artifact, art-0 would be unknown to it and g2 stale."""
    samples = store_made_under(storage_database, {"g1": "art-0", "g2": "art-0"})
    assert tenure(storage_database, PublishingComponent(1)) == [["g1-0", "g1-1"]]
    snapshot = ScenarioSettings(storage_database, "s").get(snapshot_key("c"))
    assert snapshot["served_artifacts"] == ["art-0", "art-1"]
    assert tenure(storage_database, PublishingComponent(1, start=1)) == [["g2-0", "g2-1"]]
    assert samples.untrained("c") == []


def test_status_table_says_which_of_several_trainers_the_engine_serves() -> None:
    """docs/components.md#a-scenario-of-several-components: a row per trainer, and a line that
    names the one whose artifacts answer the calls (none behind a plain URL engine)."""
    pytest.importorskip("starlette")  # reef status is part of the service (the server extra)
    from reef.server.status import status_table

    trainers: list[dict[str, Any]] = [
        {"trainer": "small", "component": "local", "serves": True, "served_artifact": "a1"},
        {"trainer": "wide", "component": "local", "serves": False, "served_artifact": "b1"},
    ]
    document = {"scenarios": [{"scenario": "s", "training_mode": "auto", "trainers": trainers}]}
    lines = status_table(document).splitlines()
    assert [line.split()[:2] for line in lines[1:3]] == [["s", "small"], ["s", "wide"]]
    assert (
        "s: the engine answers with trainer small's artifacts; the other trainers' artifacts"
        " answer no call"
    ) in lines
    trainers[0]["serves"] = False
    assert "s: the engine answers with none of its trainers' artifacts" in (
        status_table(document).splitlines()
    )
    # One trainer: nothing to tell apart.
    document["scenarios"][0]["trainers"] = trainers[:1]
    assert not [line for line in status_table(document).splitlines() if "answers with" in line]


def test_status_table_shows_what_is_held_out_as_stale() -> None:
    """docs/decisions.md#counting-what-did-not-train: the drops column shows the stale samples
    the pipeline holds out and their group-mates, beside the durable drops, not ``-``."""
    pytest.importorskip("starlette")  # reef status is part of the service (the server extra)
    from reef.server.status import status_table

    trainer: dict[str, Any] = {
        "trainer": "c",
        "drops": {"engine_abort": 2},
        "pipeline": {"stale_samples": 272, "held_with_stale_group": 3},
    }
    document = {"scenarios": [{"scenario": "s", "training_mode": "auto", "trainers": [trainer]}]}
    row = status_table(document).splitlines()[1]
    assert row.rstrip().endswith("engine_abort=2, stale=272, held_with_stale=3")
    trainer["drops"] = {}
    trainer["pipeline"] = {"stale_samples": 0}
    assert status_table(document).splitlines()[1].rstrip().endswith("-")
