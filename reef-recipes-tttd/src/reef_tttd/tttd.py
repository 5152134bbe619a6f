"""TTTD's stages: the step grid of a discovery runner, trained with entropic advantages.

:class:`TTTDSamples` collects the runner's reports (cells in ``metadata.tttd``) into steps
(:mod:`reef_tttd.grid`); :class:`TTTDJobData` makes each step one job's data, each sample in
its comparison group, and names the advantage estimator in the job data's metadata
(:class:`reef.AdvantageSettings`, TTT-Discover's entropic weights by default): the component
computes the advantages (nothing numeric happens here).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import attrs

from reef import (
    AdvantageSettings,
    JobData,
    PipelineContext,
    PluginSettings,
    Sample,
    config_option,
)
from reef_tttd.grid import StepGridJobData, StepGridJobSettings, StepGridSamples


class TTTDSamples(StepGridSamples):
    """TTTD's record-to-sample stage: the runner's rollouts, cells in ``metadata.tttd``."""

    cell_key: ClassVar[str] = "tttd"


@attrs.frozen
class TTTDJobDataSettings(StepGridJobSettings):
    """The job size keys and the advantage estimator."""

    advantage: AdvantageSettings = config_option(
        factory=lambda: AdvantageSettings(estimator="entropic"),
        help="the estimator the component computes advantages with: entropic (beta null: chosen"
        " per group so the reweighting is kl_target nats from uniform) or group_mean",
    )


class TTTDJobData(StepGridJobData):
    """TTTD's sample-to-job stage: one step per job, entropic advantages.

    :param advantage: written into each job data's metadata for the component.
    """

    Settings: ClassVar[type[PluginSettings]] = TTTDJobDataSettings
    samples_class: ClassVar[type[StepGridSamples]] = TTTDSamples

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
            max_job_samples=max_job_samples,
            buffer_size=buffer_size,
        )
        self.advantage = advantage or AdvantageSettings(estimator="entropic")

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """The step's samples, each in its comparison group, with the advantage estimator."""
        metadata: dict[str, Any] = {"advantage": self.advantage.as_keywords()}
        return JobData(data_id, tuple(self.in_comparison_groups(samples)), metadata=metadata)
