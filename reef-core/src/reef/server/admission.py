"""What the service knows of a scenario's trainers, to admit as they will read.

Admission answers for the trainers before they see a request: an uploaded trajectory is
admitted only if every trainer that takes uploads takes it (its record-to-sample stage's
``uploaded_sample``, P-UP-3, P-UP-5), a training mode only if every trainer's sample-to-job
stage supports it (P-MODE-12). :class:`ScenarioAdmission` holds exactly that, per trainer, and
what ``GET /reef/status`` shows before a trainer's first snapshot (its job and buffer sizes).

It is made once, with the application: each trainer's stages are built as its trainer builds
them (:func:`reef.train.stages.build_stages`, so a bad config stops ``reef serve`` before it
listens, and admission cannot disagree with the trainer about a class or a config), their facts
are read, and every stage is closed at once except the record-to-sample stage of a trainer that
takes uploads, which admission asks until the service stops.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from reef.core.deployment import ScenarioSection
from reef.core.records import JSON
from reef.pipeline_context import PipelineContext, TrainingMode
from reef.plugins import Plugins
from reef.record2sample.stage import Record2Sample
from reef.server.errors import ApiError, UploadRejected
from reef.train.stages import build_stages, scenario_trainers

__all__ = ["ScenarioAdmission", "TrainerAdmission"]


@attrs.frozen
class TrainerAdmission:
    """One trainer's stages, as admission and status need them.

    :ivar stage: the class name of its sample-to-job stage, for messages.
    :ivar accepts_trajectories: its sample-to-job stage takes uploaded trajectories.
    :ivar supported_training_modes: the training modes that stage supports, sorted.
    :ivar job_samples: the samples of one job, as configured.
    :ivar buffer_size: the samples its buffer holds, as configured.
    :ivar uploads: its record-to-sample stage, kept for ``uploaded_sample`` when the trainer
        takes uploads; ``None`` otherwise.
    :ivar component: its training component, as the deployment names it.
    """

    stage: str
    accepts_trajectories: bool
    supported_training_modes: tuple[TrainingMode, ...]
    job_samples: int | None
    buffer_size: int | None
    uploads: Record2Sample | None = attrs.field(default=None, eq=False, repr=False)
    component: str | None = None


@attrs.frozen
class ScenarioAdmission:
    """What admission needs of a scenario's trainers (see the module docstring).

    :ivar scenario: the scenario's name.
    :ivar trainers: each trainer, by name (none for a scenario without a ``training`` section).
    """

    scenario: str
    trainers: Mapping[str, TrainerAdmission]

    @classmethod
    def build(
        cls,
        scenario: str,
        section: ScenarioSection,
        *,
        plugins: Plugins,
        environ: Mapping[str, str] | None = None,
    ) -> ScenarioAdmission:
        """Build each trainer's stages once, keep what admission needs, close the rest.

        :raises reef.core.deployment.DeploymentError: when a class cannot be resolved, a config
            does not parse or a stage refuses its config.
        """
        names = scenario_trainers(section)
        components = {entry.trainer: entry.component for entry in section.trainings}
        trainers = {}
        for name in names:
            context = PipelineContext(scenario=scenario, component=name, trainers=names)
            record2sample, sample2job = build_stages(
                scenario, section, plugins=plugins, context=context, environ=environ
            )
            accepts = sample2job.accepts_trajectories
            trainers[name] = TrainerAdmission(
                stage=type(sample2job).__name__,
                accepts_trajectories=accepts,
                supported_training_modes=tuple(sorted(sample2job.supported_training_modes)),
                job_samples=sample2job.job_samples,
                buffer_size=sample2job.buffer_size,
                uploads=record2sample if accepts else None,
                component=components[name],
            )
            sample2job.close()
            if not accepts:
                record2sample.close()
        return cls(scenario, trainers)

    def check_upload(self, item_id: str, trajectory: JSON) -> None:
        """Admit an uploaded trajectory as each trainer's pipeline will read it (P-UP-3,
        P-UP-5): some trainer takes uploads, and every one that does takes this one.

        :raises UploadRejected: naming the trajectory and the trainer that refused it.
        """
        accepting = {n: t.uploads for n, t in self.trainers.items() if t.uploads is not None}
        if not accepting:
            raise UploadRejected(
                item_id,
                "scenario",
                f"no trainer of scenario {self.scenario!r} accepts uploaded trajectories",
            )
        for name, stage in accepting.items():
            try:
                stage.uploaded_sample(trajectory)
            except ValueError as exc:
                raise UploadRejected(
                    item_id,
                    "$.trajectory",
                    f"trajectory {item_id!r} refused by trainer {name!r}: {exc}",
                ) from None

    def check_training_mode(self, mode: TrainingMode) -> None:
        """Admit ``mode`` only if every trainer supports it (P-MODE-12).

        :raises ApiError: 409 ``unsupported_mode``, naming each trainer that does not.
        """
        refusing = [
            f"{name} ({t.stage})"
            for name, t in self.trainers.items()
            if mode not in t.supported_training_modes
        ]
        if refusing:
            raise ApiError.one(
                409,
                "unsupported_mode",
                "$.training_mode",
                f"training mode {mode!r} is not supported by trainer {', '.join(refusing)}",
            )

    def close(self) -> None:
        """Close the stages kept for uploads (their background work, if any)."""
        for trainer in self.trainers.values():
            if trainer.uploads is not None:
                trainer.uploads.close()
