"""Experiment trackers (issue 29): the ``trackers:`` section read and checked, a plugin's
tracker, and the built-in TensorBoard, MLflow and W&B trackers run by a real trainer, read back
with each tracker's own reader (TensorBoard's event reader, MLflow's client on a file store,
W&B's offline transaction log), across a restart that resumes the same run."""

from __future__ import annotations

import glob
import json
import struct
import time
from collections.abc import Iterator, Mapping
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import attrs
import pytest

from reef.components.interface import Artifact, JobHandle
from reef.core.evals import EvalResult, ItemOutcome
from reef.core.job_data import JobData, JobOutcome
from reef.core.plugins import PluginSettings
from reef.embed import DeploymentError, load_deployment
from reef.hookspecs import hookimpl
from reef.plugins import Plugins
from reef.plugins.registrar import PluginKind, PluginRegistrar
from reef.plugins.scenarios import deployment_trackers
from reef.storage import ArtifactEvaluations, Database, ScenarioSettings, TrainerSamples
from reef.storage.scenario_settings import snapshot_key, tracker_run_key
from reef.testing.components import RecordingComponent, grouped_parts, store_groups
from reef.trackers import TrackedJob, Tracker
from reef.train.trainer import Trainer, TrainerSettings


class MetricComponent(RecordingComponent):
    """A recording component whose jobs finish with a component's metrics, and that
    publishes a new artifact after each; given ``evaluations``, it scores each artifact it
    publishes as the eval gate's wrapper does (``reef.evals.gate.GatedComponent``)."""

    def __init__(self, evaluations: ArtifactEvaluations | None = None) -> None:
        super().__init__()
        self.evaluations = evaluations

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        n = next(i for i, d in enumerate(self.submitted) if d.id == handle.job_id)
        metrics = {"loss": 1.5 - n, "tokens": 40 + n, "unrenderable_samples": n, "teacher_kl": 0.25}
        return JobOutcome(handle.job_id, self.name, "finished", metrics)

    def publish(self) -> Artifact:
        artifact_id = f"art-{len(self.submitted)}"
        if self.evaluations is not None:
            items = (ItemOutcome("i1", 1.0, "yes"), ItemOutcome("i2", 0.0, None, "engine down"))
            score = len(self.submitted) / 4
            self.evaluations.save(
                EvalResult("s", "c", artifact_id, "qa", score, items, {}, time.time())
            )
        return Artifact(artifact_id, Path("."))


@attrs.frozen
class ListSettings(PluginSettings):
    label: str = "runs"


class ListTracker(Tracker):
    """A third party's tracker: keeps what it was given in :data:`RECEIVED`."""

    Settings = ListSettings
    opened: list[str | None] = []
    received: list[TrackedJob] = []

    def open(self, run_id: str | None) -> str:
        ListTracker.opened.append(run_id)
        return run_id or f"{self.run_name}-run"

    def log_job(self, job: TrackedJob) -> None:
        ListTracker.received.append(job)


class TrackerPlugin:
    """Registers :class:`ListTracker`, and says something of each job as Agent ECC's seal does."""

    @hookimpl
    def reef_register_trackers(self, registry: PluginRegistrar) -> None:
        registry.register("list", ListTracker)

    @hookimpl
    def reef_job_provenance(self, job_data: JobData) -> Mapping[str, Any] | None:
        return {"seal": {"job": {"epoch": {"number": 3}, "failed": False, "mode": "audit"}}}


def _plugins() -> Plugins:
    plugins = Plugins()
    plugins.load()
    plugins.register(TrackerPlugin(), "trackers-test")
    return plugins


def _needs(extra: str) -> pytest.MarkDecorator:
    """Skips where the built-in tracker's library (its reef-core extra) is not installed."""
    return pytest.mark.skipif(find_spec(extra) is None, reason=f"needs reef-core[{extra}]")


DEPLOYMENT = """
scenarios:
  s:
    recipe: grouped
trackers:
{trackers}
"""


def test_a_plugin_registers_a_tracker_and_the_deployment_configures_it() -> None:
    plugins = _plugins()
    assert "list" in plugins.names(PluginKind.TRACKER)
    # The built-in trackers are registered where their extras are installed.
    built_in = {name for name in ("tensorboard", "mlflow", "wandb") if find_spec(name) is not None}
    assert built_in <= set(plugins.names(PluginKind.TRACKER))
    deployment = load_deployment(DEPLOYMENT.format(trackers="  list: {label: x}"), plugins=plugins)
    assert deployment_trackers(deployment, plugins) == {"list": ListSettings(label="x")}


@pytest.mark.parametrize(
    ("trackers", "expected"),
    [
        ("  lsit: {}", "unknown tracker 'lsit'; did you mean 'list'? (installed tracker names:"),
        ("  list: {lable: x}", "@ $.trackers.list.lable"),
        pytest.param(
            "  tensorboard: {}", "@ $.trackers.tensorboard.log_dir", marks=_needs("tensorboard")
        ),
        pytest.param(
            "  wandb: {project: p, mode: sometimes}",
            "@ $.trackers.wandb.mode",
            marks=_needs("wandb"),
        ),
    ],
)
def test_a_wrong_trackers_section_is_refused_naming_the_key(trackers: str, expected: str) -> None:
    with pytest.raises(DeploymentError) as refused:
        load_deployment(DEPLOYMENT.format(trackers=trackers), plugins=_plugins())
    assert expected in str(refused.value)


def _store_group(database: Database, group: str) -> None:
    """One unit of two trajectory samples of trainer ``c``, rewards 0.0 and 1.0: one job."""
    store_groups(TrainerSamples(database, "s"), groups=(group,))


def _trainer(database: Database, component: RecordingComponent, trackers: list[Any]) -> Trainer:
    return Trainer(
        "s",
        "c",
        database=database,
        build=grouped_parts(component),
        plugins=_plugins(),
        settings=TrainerSettings(poll_interval=0.05),
        trackers=trackers,
    )


def _train(trainer: Trainer, component: RecordingComponent) -> None:
    trainer.start()
    try:
        assert component.all_submitted.wait(30), "no job submitted in 30 s"
    finally:
        trainer.stop(30)


def test_each_job_reaches_the_tracker_once_and_a_restart_resumes_its_run(
    storage_database: Database,
) -> None:
    """Two tenures of one trainer: the second resumes the run the first opened (its id kept in
    the store), does not log again the job the first logged (the trainer replays it), and logs
    its own job at a later step."""
    ListTracker.opened, ListTracker.received = [], []
    _store_group(storage_database, "g1")
    settings = ListSettings()
    evaluations = ArtifactEvaluations(storage_database, "s")
    first = MetricComponent(evaluations)
    _train(
        _trainer(
            storage_database, first, [("list", ListTracker(settings, scenario="s", trainer="c"))]
        ),
        first,
    )
    _store_group(storage_database, "g2")
    second = MetricComponent(evaluations)
    second.submitted.append(first.submitted[0])  # its numbering of jobs goes on
    second.expected_jobs = 2
    _train(
        _trainer(
            storage_database, second, [("list", ListTracker(settings, scenario="s", trainer="c"))]
        ),
        second,
    )

    assert ListTracker.opened == [None, "s/c-run"]
    one, two = ListTracker.received
    assert (one.job_id, two.job_id) == (first.submitted[0].id, second.submitted[1].id)
    assert one.step < two.step
    assert (one.artifact_id, two.artifact_id) == ("art-1", "art-2")
    assert one.figures["reward/mean"] == 0.5
    assert one.figures["reward/std"] == 0.5
    assert (one.figures["reward/min"], one.figures["reward/max"]) == (0.0, 1.0)
    assert one.figures["train/loss"] == 1.5
    assert two.figures["train/loss"] == 0.5
    assert one.figures["train/tokens"] == 40
    assert one.figures["train/teacher_kl"] == 0.25
    assert two.figures["train/unrenderable_samples"] == 1
    assert one.figures["samples/trained"] == 2
    assert one.figures["job/failed"] == 0
    assert one.figures["seal/epoch/number"] == 3
    assert one.figures["seal/failed"] == 0
    assert "seal/mode" not in one.figures  # text is no figure
    # The evaluation of the artifact each job made, measured when it was published.
    assert (one.figures["eval/qa/score"], two.figures["eval/qa/score"]) == (0.25, 0.5)
    assert one.figures["eval/qa/errors"] == 1
    stored = ScenarioSettings(storage_database, "s").get(tracker_run_key("c", "list"))
    assert stored == {"run_id": "s/c-run", "step": two.step}
    snapshot = ScenarioSettings(storage_database, "s").get(snapshot_key("c"))
    assert snapshot["trackers"] == {
        "list": {"run_id": "s/c-run", "step": two.step, "missed_jobs": 0}
    }


class BrokenTracker(ListTracker):
    def log_job(self, job: TrackedJob) -> None:
        raise ConnectionError("tracker down")


def test_a_tracker_that_fails_never_stops_training_and_its_misses_are_counted(
    storage_database: Database,
) -> None:
    _store_group(storage_database, "g1")
    component = MetricComponent()
    tracker = BrokenTracker(ListSettings(), scenario="s", trainer="c")
    _train(_trainer(storage_database, component, [("broken", tracker)]), component)
    snapshot = ScenarioSettings(storage_database, "s").get(snapshot_key("c"))
    assert snapshot["trackers"]["broken"]["missed_jobs"] == 1
    assert snapshot["jobs_ended"] == 1
    assert any("tracker down" in e["error"] for e in snapshot["last_errors"])


def _two_tenures(database: Database, make: Any) -> tuple[MetricComponent, MetricComponent]:
    """Train one job, restart, train the next, with a fresh tracker from ``make()`` each time."""
    _store_group(database, "g1")
    first = MetricComponent()
    _train(_trainer(database, first, [("t", make())]), first)
    _store_group(database, "g2")
    second = MetricComponent()
    second.submitted.append(first.submitted[0])
    second.expected_jobs = 2
    _train(_trainer(database, second, [("t", make())]), second)
    return first, second


def test_tensorboard_gets_each_job_as_scalars_and_the_artifact_as_text(
    storage_database: Database, tmp_path: Path
) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.util import tensor_util

    from reef.trackers.tensorboard import TensorBoardSettings, TensorBoardTracker

    settings = TensorBoardSettings(log_dir=str(tmp_path / "tb"))
    _two_tenures(storage_database, lambda: TensorBoardTracker(settings, scenario="s", trainer="c"))
    run = tmp_path / "tb" / "s" / "c"
    assert len(list(run.glob("events.out.tfevents.*"))) == 2  # one file per tenure, one run
    reader = event_accumulator.EventAccumulator(
        str(run), size_guidance={event_accumulator.TENSORS: 0}
    )
    reader.Reload()
    loss = [
        (e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
        for e in reader.Tensors("train/loss")
    ]
    assert [value for _, value in loss] == [1.5, 0.5]
    assert loss[0][0] < loss[1][0]
    std = [float(tensor_util.make_ndarray(e.tensor_proto)) for e in reader.Tensors("reward/std")]
    assert std == [0.5, 0.5]
    artifacts = [tensor_util.make_ndarray(e.tensor_proto)[0] for e in reader.Tensors("artifact")]
    assert artifacts == [b"art-1", b"art-2"]


def test_mlflow_gets_each_job_in_one_run_resumed_after_the_restart(
    storage_database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    from reef.trackers.mlflow import MlflowSettings, MlflowTracker

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # the file store, for the test
    uri = (tmp_path / "mlruns").as_uri()
    settings = MlflowSettings(tracking_uri=uri, experiment="reef-test")
    _two_tenures(storage_database, lambda: MlflowTracker(settings, scenario="s", trainer="c"))

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("reef-test")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1  # the restart resumed it
    run = runs[0]
    stored = ScenarioSettings(storage_database, "s").get(tracker_run_key("c", "t"))
    assert stored["run_id"] == run.info.run_id
    assert run.info.run_name == "s/c"
    loss = client.get_metric_history(run.info.run_id, "train/loss")
    assert [m.value for m in sorted(loss, key=lambda m: m.step)] == [1.5, 0.5]
    mean = client.get_metric_history(run.info.run_id, "reward/mean")
    assert [m.value for m in mean] == [0.5, 0.5]
    assert run.data.tags["reef.artifact"] == "art-2"
    jobs = sorted(a.path for a in client.list_artifacts(run.info.run_id, "reef-jobs"))
    assert len(jobs) == 2
    last = json.loads(
        Path(client.download_artifacts(run.info.run_id, jobs[1], str(tmp_path))).read_text()
    )
    assert last["artifact_id"] == "art-2"
    assert last["figures"]["train/loss"] == 0.5


def _wandb_records(path: Path) -> Iterator[Any]:
    """The records of a W&B offline run's transaction log (``run-<id>.wandb``): a 7-byte
    header, then LevelDB log blocks of 32 KiB whose records are ``wandb_internal.Record``
    protobufs (the file ``wandb sync`` replays)."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, block, pending = 7, 32768, b""
    while position + 7 <= len(data):
        left = block - position % block
        if left < 7:
            position += left
            continue
        _checksum, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if length == 0 and kind == 0:
            position += left
            continue
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a full record, or the last part of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def test_wandb_gets_each_job_in_one_offline_run_resumed_after_the_restart(
    storage_database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    from reef.trackers.wandb import WandbSettings, WandbTracker

    monkeypatch.setenv("WANDB_SILENT", "true")
    settings = WandbSettings(project="reef-test", mode="offline", dir=str(tmp_path / "w"))
    _two_tenures(storage_database, lambda: WandbTracker(settings, scenario="s", trainer="c"))

    run_id = ScenarioSettings(storage_database, "s").get(tracker_run_key("c", "t"))["run_id"]
    logs = sorted(glob.glob(str(tmp_path / "w" / "wandb" / "offline-run-*" / "run-*.wandb")))
    assert len(logs) == 2
    assert all(log.endswith(f"run-{run_id}.wandb") for log in logs)
    history = []
    for log in logs:
        for record in _wandb_records(Path(log)):
            if record.WhichOneof("record_type") == "run":
                assert record.run.run_id == run_id
                assert record.run.display_name == "s/c"
            if record.WhichOneof("record_type") == "history":
                history.append(
                    {
                        "/".join(i.nested_key) or i.key: json.loads(i.value_json)
                        for i in record.history.item
                    }
                )
    jobs = sorted((h for h in history if "train/loss" in h), key=lambda h: h["_step"])
    assert [h["train/loss"] for h in jobs] == [1.5, 0.5], history
    assert [h["artifact"] for h in jobs] == ["art-1", "art-2"]
    assert [h["reward/std"] for h in jobs] == [0.5, 0.5]
    assert jobs[0]["_step"] < jobs[1]["_step"]
