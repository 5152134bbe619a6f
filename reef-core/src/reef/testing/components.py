"""For tests of the trainer loop: a training component that trains nothing and finishes each
job at once, keeping every job's data so that a test can read what was submitted;
:func:`store_groups`, the samples such a test trains; :func:`grouped_parts`, how its
trainer builds a grouped pipeline around the component; :func:`train_until_submitted`, a trainer
run until the component got its jobs; and :func:`tiny_local_component`, the ``local`` component
with a TinyGPT small enough to train in a test (needs ``reef-core[torch]``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reef.components.interface import Artifact, JobHandle
from reef.core.job_data import JobData, JobOutcome, TrajectorySample, sample_body
from reef.pipeline_context import PipelineContext
from reef.plugins import Plugins
from reef.recipe.grouped.processor import GroupedJobData
from reef.record2sample.no_samples import NoSamples
from reef.record2sample.stage import Record2Sample
from reef.storage import Database, NewSample, TrainerSamples
from reef.train.pipeline import TrainingPipeline
from reef.train.trainer import Trainer, TrainerParts, TrainerSettings

if TYPE_CHECKING:
    from reef.components.local.component import LocalComponent


class RecordingComponent:
    """Keeps what it is given in :attr:`submitted`, and sets :attr:`all_submitted` once
    ``expected_jobs`` jobs were submitted, so a test waits on an event instead of sleeping.

    :param expected_jobs: how many submissions set :attr:`all_submitted`.
    :param name: the component's (and so the trainer's) name.
    """

    def __init__(self, expected_jobs: int = 1, *, name: str = "c") -> None:
        self.name = name
        self.expected_jobs = expected_jobs
        self.submitted: list[JobData] = []
        self.all_submitted = threading.Event()

    def submit(self, data: JobData, parameters: Mapping[str, Any] | None = None) -> JobHandle:
        self.submitted.append(data)
        if len(self.submitted) >= self.expected_jobs:
            self.all_submitted.set()
        return JobHandle(data.id, self.name)

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        return JobOutcome(handle.job_id, self.name, "finished")

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobOutcome:
        return JobOutcome(handle.job_id, self.name, "finished")

    def publish(self) -> Artifact:
        return Artifact("art-0", Path("."))

    def close(self) -> None:
        pass


def store_groups(
    samples: TrainerSamples, trainer: str = "c", *, groups: Sequence[str] = ("g1", "g2")
) -> None:
    """Register ``trainer`` and store a unit of two trajectory samples made by it for each of
    ``groups``: by default ``g1`` (samples ``g1-0``, ``g1-1``) then ``g2``, rewards 0.0 and 1.0
    in each."""
    samples.register_trainer(trainer, reads_uploads=False)
    for group in groups:
        unit = [
            NewSample(
                f"{group}-{i}",
                "trajectory",
                sample_body(TrajectorySample({"steps": []}, reward=float(i))),
            )
            for i in range(2)
        ]
        samples.add_record_samples(trainer, unit, [f"record-{group}"])


def grouped_parts(
    component: RecordingComponent,
    *,
    job_samples: int = 2,
    buffer_size: int = 10,
    record2sample: type[Record2Sample] = NoSamples,
    replay_last_outcome: bool = True,
) -> Callable[[Database], TrainerParts]:
    """How a test's trainer (scenario ``s``, trainer ``c``) builds its parts on the fenced
    database of a tenure: a ``record2sample`` stage, grouped jobs of ``job_samples`` samples
    (a buffer of ``buffer_size``), and ``component``. ``replay_last_outcome=False`` builds the
    pipeline as the runtime does: the trainer replays the last outcome itself."""

    def build(database: Database) -> TrainerParts:
        context = PipelineContext("s", "c")
        pipeline = TrainingPipeline(
            record2sample(context),
            GroupedJobData(context, job_samples=job_samples, buffer_size=buffer_size),
            samples=TrainerSamples(database, "s"),
            context=context,
            replay_last_outcome=replay_last_outcome,
        )
        return TrainerParts(pipeline, component)

    return build


def train_until_submitted(
    database: Database,
    component: RecordingComponent,
    build: Callable[[Database], TrainerParts] | None = None,
    *,
    plugins: Plugins | None = None,
) -> None:
    """Run the trainer ``c`` of scenario ``s`` (polling every 0.05 s) until ``component`` got
    its expected jobs, then stop it (a running job ends and commits first).

    :param build: how the trainer builds its parts; :func:`grouped_parts` of ``component`` by
        default.
    :raises AssertionError: when the jobs did not all come within 30 seconds.
    """
    trainer = Trainer(
        "s",
        "c",
        database=database,
        build=build or grouped_parts(component),
        plugins=plugins,
        settings=TrainerSettings(poll_interval=0.05),
    )
    trainer.start()
    try:
        if not component.all_submitted.wait(30):
            raise AssertionError(
                f"the trainer submitted {len(component.submitted)} of "
                f"{component.expected_jobs} jobs in 30 s"
            )
    finally:
        trainer.stop(30)


def tiny_local_component(state_dir: Path, **settings: Any) -> LocalComponent:
    """The ``local`` component at ``state_dir`` with a TinyGPT of width 32, one layer, a context
    of 96 tokens, batches of 4 and a learning rate of 3e-3; ``settings`` override any of them."""
    from reef.components.local.component import (
        LocalComponent,  # torch: only a test that trains needs it
    )

    config = {
        "state_dir": str(state_dir),
        "d_model": 32,
        "n_layers": 1,
        "n_heads": 2,
        "max_seq_len": 96,
        "batch_size": 4,
        "learning_rate": 3e-3,
        **settings,
    }
    return LocalComponent.from_config(config)
