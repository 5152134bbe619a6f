"""The trainer driving the ``tinker`` component (against the stand-in service) through its real
loop on SQLite (and PostgreSQL with REEF_TEST_DATABASE_URL): jobs submitted, ended, committed and
published; a process that dies after Tinker saved a job's checkpoint and before anything was
recorded is recovered by the next trainer without training the job again."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("tinker")

from doubles.tinker_service import TinkerStandIn

from reef.components.tinker.component import TinkerComponent
from reef.components.tinker.settings import TinkerComponentSettings
from reef.core.job_data import sample_body
from reef.pipeline_context import PipelineContext
from reef.recipe.grouped.processor import GroupedJobData
from reef.record2sample.no_samples import NoSamples
from reef.storage import Database, NewSample, ScenarioSettings, TrainerSamples
from reef.storage.scenario_settings import snapshot_key
from reef.testing.samples import colour_samples
from reef.train.pipeline import TrainingPipeline
from reef.train.trainer import Trainer, TrainerParts, TrainerSettings


def store_groups(database: Database, trainer: str, scenario: str = "s") -> None:
    samples = TrainerSamples(database, scenario)
    samples.register_trainer(trainer, reads_uploads=False)
    for group in range(2):
        unit = [
            NewSample(f"g{group}-{i}", "trajectory", sample_body(colour_samples(4)[i]))
            for i in range(4)
        ]
        samples.add_record_samples(trainer, unit, [f"record-{group}"])


def parts(
    root: Path, service: TinkerStandIn, trainer: str, scenario: str = "s"
) -> Callable[[Database], TrainerParts]:
    def build(database: Database) -> TrainerParts:
        context = PipelineContext(scenario, trainer)
        pipeline = TrainingPipeline(
            NoSamples(context),
            GroupedJobData(context, job_samples=4, buffer_size=4),
            samples=TrainerSamples(database, scenario),
            context=context,
        )
        settings = TinkerComponentSettings.parse(
            {"state_dir": str(root), "base_model": "stand-in/tiny", "tokenizer": "byte",
             "batch_size": 2, "learning_rate": 3e-3},
            plugin_class=TinkerComponent,
        )  # fmt: skip
        component = TinkerComponent(
            settings,
            name=trainer,
            connect=lambda _url, _key: service,  # type: ignore[arg-type,return-value]
            environ={"TINKER_API_KEY": "k"},
        )
        return TrainerParts(pipeline, component)

    return build


@pytest.fixture
def service() -> Iterator[TinkerStandIn]:
    stand_in = TinkerStandIn()
    yield stand_in
    stand_in.close()


def run_until(trainer: Trainer, jobs: int) -> None:
    waited = threading.Event()
    for _ in range(1200):
        if trainer.jobs_ended >= jobs:
            return
        waited.wait(0.05)
    raise AssertionError(f"the trainer ended {trainer.jobs_ended} of {jobs} jobs")


def trained_weights(service: TinkerStandIn, database: Database, scenario: str) -> Any:
    serving = ScenarioSettings(database, scenario).get(snapshot_key("tinker"))["served_artifact_id"]
    (sampler,) = {p for p in service.sampler_weights if serving.partition(":")[2][:40] in p}
    return service.sampler_weights[sampler]


def test_the_trainer_trains_and_publishes_through_tinker(
    storage_database: Database, service: TinkerStandIn, tmp_path: Path
) -> None:
    """rule: P-PIPE-9 P-PIPE-12 two jobs end finished, each sample is counted trained once, and
    the trainer serves the artifact the component published after the last job."""
    store_groups(storage_database, "tinker")
    trainer = Trainer(
        "s",
        "tinker",
        database=storage_database,
        build=parts(tmp_path / "tinker", service, "tinker"),
        settings=TrainerSettings(poll_interval=0.05),
    )
    trainer.start()
    try:
        run_until(trainer, 2)
    finally:
        trainer.stop(60)
    samples = TrainerSamples(storage_database, "s")
    ids = [f"g{g}-{i}" for g in range(2) for i in range(4)]
    assert samples.train_counts("tinker", ids) == dict.fromkeys(ids, 1)
    last = samples.last_job_outcome("tinker")
    assert last is not None
    assert last["event"] == "finished"
    assert last["metrics"]["steps"] == 2
    latest = (tmp_path / "tinker" / "artifacts" / "LATEST").read_text()
    snapshot = ScenarioSettings(storage_database, "s").get(snapshot_key("tinker"))
    assert snapshot["served_artifact_id"] == latest


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_trainer_that_died_after_tinkers_checkpoint_trains_nothing_twice(
    storage_database: Database, service: TinkerStandIn, tmp_path: Path
) -> None:
    """rule: P-PIPE-13 The process dies while Tinker saves the first job's checkpoint (saved,
    unanswered): the next trainer finds the job running, the component finds its checkpoint,
    the job ends finished once, and the weights equal those of a run without the crash."""
    store_groups(storage_database, "tinker")
    service.kill_process("save_state", after=1, applied=True)  # the first is the initial save
    dying = Trainer(
        "s",
        "tinker",
        database=storage_database,
        build=parts(tmp_path / "crashed", service, "tinker"),
        settings=TrainerSettings(poll_interval=0.05, lease_ttl=0.5),
    )
    dying.start()
    assert dying._thread is not None
    dying._thread.join(60)  # the "process" died in the job
    assert not dying._thread.is_alive()
    assert dying.jobs_ended == 0

    restarted = Trainer(
        "s",
        "tinker",
        database=storage_database,
        build=parts(tmp_path / "crashed", service, "tinker"),
        settings=TrainerSettings(poll_interval=0.05, lease_ttl=0.5),
    )
    restarted.start()
    try:
        run_until(restarted, 2)
    finally:
        restarted.stop(60)
    forward_backwards = service.calls.count("forward_backward")
    assert forward_backwards == 4  # two jobs of two steps, none again
    crashed = trained_weights(service, storage_database, "s")

    store_groups(storage_database, "tinker", scenario="clean")
    clean = Trainer(
        "clean",
        "tinker",
        database=storage_database,
        build=parts(tmp_path / "clean", service, "tinker", scenario="clean"),
        settings=TrainerSettings(poll_interval=0.05),
    )
    clean.start()
    try:
        run_until(clean, 2)
    finally:
        clean.stop(60)
    reference = trained_weights(service, storage_database, "clean")
    assert crashed.keys() == reference.keys()
    assert all((crashed[k] == reference[k]).all() for k in crashed)
