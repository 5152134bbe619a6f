"""TTTD's sample-to-job stage: one step of the grid per job, trained with entropic advantages.

The step grid is :class:`reef_tttd.grid.TTTDSamples`'s; this stage reads it from that stage
(P-STG-9). A step is one fixed unit, so a job's data is one step: the stage passes the step's
size as ``max_job_samples`` and a larger ``job_samples`` (or ``buffer_size``) is refused with
``PluginConfigError`` (P-SIZE-4); without ``job_samples`` a job is one step.

Each sample's group becomes its comparison group within the step (the store groups the whole
step), so the component compares a rollout with the others of its group only. The job data's
metadata names the advantage estimator (:class:`reef.AdvantageSettings`, entropic by default);
the component computes the advantages (nothing numeric happens here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Self

import attrs

from reef import (
    AdvantageSettings,
    JobData,
    PipelineContext,
    PluginConfigError,
    PluginSettings,
    Record2Sample,
    Sample,
    Sample2Job,
    Sample2JobSettings,
    config_option,
)
from reef_tttd.grid import CELL_KEY, StepGrid, TTTDSamples


@attrs.frozen
class TTTDJobDataSettings(Sample2JobSettings):
    """The job size keys (``job_samples`` defaults to one step) and the advantage estimator."""

    advantage: AdvantageSettings = config_option(
        factory=lambda: AdvantageSettings(estimator="entropic"),
        help="the estimator the component computes advantages with: entropic (beta null: chosen"
        " per group so the reweighting is kl_target nats from uniform) or group_mean",
    )


class TTTDJobData(Sample2Job):
    """TTTD's sample-to-job stage (see the module's documentation).

    :param max_job_samples: the samples of one step of the grid.
    :param advantage: written into each job data's metadata for the component.
    :raises PluginConfigError: for a ``job_samples`` or ``buffer_size`` above one step.
    """

    Settings: ClassVar[type[PluginSettings]] = TTTDJobDataSettings

    def __init__(
        self,
        context: PipelineContext,
        *,
        job_samples: int,
        max_job_samples: int,
        buffer_size: int | None = None,
        advantage: AdvantageSettings | None = None,
    ) -> None:
        super().__init__(
            context,
            job_samples=job_samples,
            buffer_size=buffer_size,
            max_job_samples=max_job_samples,
        )
        if self.buffer_size > max_job_samples:
            raise PluginConfigError(
                type(self).__name__,
                "$.buffer_size",
                f"{self.buffer_size} is more than one step of the grid ({max_job_samples}):"
                " a job trains one step",
            )
        self.advantage = advantage or AdvantageSettings(estimator="entropic")

    @classmethod
    def grid_of(cls, record2sample: Record2Sample) -> StepGrid:
        """The step grid of ``record2sample``, the stage that owns it (P-STG-9).

        :raises PluginConfigError: when the record-to-sample stage is not a ``TTTDSamples``.
        """
        if not isinstance(record2sample, TTTDSamples):
            raise PluginConfigError(
                cls.__name__,
                "$",
                f"reads the step grid from TTTDSamples, but the record-to-sample stage is"
                f" {type(record2sample).__name__}: name TTTDSamples in pipeline.record2sample",
            )
        return record2sample.grid

    @classmethod
    def max_job_samples_for(cls, record2sample: Record2Sample) -> int | None:
        """One step of the grid (P-SIZE-4)."""
        return cls.grid_of(record2sample).step_samples

    @classmethod
    def from_settings(
        cls,
        settings: Sample2JobSettings,
        *,
        context: PipelineContext,
        record2sample: Record2Sample,
        environ: Mapping[str, str],
    ) -> Self:
        """The stage with the grid's step size read from ``record2sample``."""
        del environ
        assert isinstance(settings, TTTDJobDataSettings)
        step = cls.grid_of(record2sample).step_samples
        return cls(
            context,
            job_samples=settings.job_samples or step,
            buffer_size=settings.buffer_size,
            max_job_samples=step,
            advantage=settings.advantage,
        )

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """The step's samples, each in its comparison group, with the advantage estimator."""
        grouped = []
        for sample in samples:
            cell = sample.metadata.get(CELL_KEY)
            if not isinstance(cell, Mapping) or "group" not in cell:
                raise ValueError(
                    f"sample {sample.sample_id} has no TTTD cell in its metadata: only"
                    " TTTDSamples makes TTTDJobData's samples"
                )
            grouped.append(attrs.evolve(sample, group_id=f"{sample.group_id}/{cell['group']}"))
        metadata: dict[str, Any] = {"advantage": self.advantage.as_keywords()}
        return JobData(data_id, tuple(grouped), metadata=metadata)
