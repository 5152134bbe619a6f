"""The stages of SFT: ``SFTSamples`` (records to samples) and ``SFTJobData`` (samples to a job).

SFT trains the agent turns of recorded trajectories, reported or uploaded. The sample of a
report is its whole trajectory (every agent reply trains), as ``ReportSamples`` makes it; an
upload trains as uploaded once it is checked. Either way the stage writes the longest sample that
may train into ``extra.reef.max_tokens``, which the training component honours (P-REND-4).

An SFT target is fixed text, not tokens the served model sampled, so no SFT sample is ever
stale: ``SFTSamples`` takes no ``max_staleness`` (the key is refused) and ``is_stale`` is always
false (P-STALE-12). No reward is needed (P-UP-9).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

import attrs

from reef import (
    JSON,
    JobData,
    PipelineContext,
    PluginSettings,
    ReportContext,
    ReportSamples,
    Sample,
    Sample2Job,
    SkippedReport,
    TrajectorySample,
    config_option,
)


@attrs.frozen
class SFTSamplesSettings(PluginSettings):
    """``SFTSamples``' one key. Not a ``Record2SampleSettings``: ``max_staleness`` is refused."""

    max_tokens: int = config_option(
        default=8192,
        help="the longest sample (in tokens) that may train; longer ones are left out of a job",
        validator=attrs.validators.gt(0),
    )


def _agent_turns(trajectory: JSON) -> int:
    """How many agent steps of ``trajectory`` train (copied context does not)."""
    steps = trajectory.get("steps")
    if not isinstance(steps, list):
        return 0
    return sum(
        1
        for step in steps
        if isinstance(step, Mapping)
        and step.get("source") == "agent"
        and not step.get("is_copied_context", False)
    )


class SFTSamples(ReportSamples):
    """The record-to-sample stage of SFT: each report's trajectory, and checked uploads.

    :param max_tokens: written into each sample's ``extra.reef.max_tokens``.
    """

    Settings: ClassVar[type[PluginSettings]] = SFTSamplesSettings

    def __init__(self, context: PipelineContext, *, max_tokens: int = 8192) -> None:
        super().__init__(context)
        self.max_tokens = max_tokens

    def is_stale(self, sample: Sample) -> bool:
        """Never: an SFT target is fixed text, whichever artifact was served (P-STALE-12)."""
        del sample
        return False

    def make_sample(self, context: ReportContext) -> Sample | SkippedReport:
        """The report's trajectory, every agent reply trained, with ``max_tokens``."""
        sample = super().make_sample(context)
        if isinstance(sample, TrajectorySample):
            return attrs.evolve(sample, trajectory=self._with_max_tokens(sample.trajectory))
        return sample

    def uploaded_sample(self, trajectory: JSON) -> Sample:
        """The upload as it came, with ``max_tokens`` (P-UP-4). Pure.

        :raises ValueError: naming the trajectory, when it has no agent turn to train.
        """
        if _agent_turns(trajectory) == 0:
            name = trajectory.get("session_id") or trajectory.get("trajectory_id") or "?"
            raise ValueError(f"trajectory {name!r} has no agent turn to train")
        return TrajectorySample(self._with_max_tokens(trajectory))

    def _with_max_tokens(self, trajectory: JSON) -> JSON:
        extra = dict(trajectory.get("extra") or {})
        extra["reef"] = {**(extra.get("reef") or {}), "max_tokens": self.max_tokens}
        return {**trajectory, "extra": extra}


class SFTJobData(Sample2Job):
    """The sample-to-job stage of SFT: the buffer's trajectories, trained by cross entropy.

    It takes uploaded trajectories (P-UP-3). Its settings are the base's job size: SFT is a
    weight recipe, so a config without ``job_samples`` fails with ``RecipeConfigError``
    (P-SIZE-2), and ``buffer_size`` below it with ``PluginConfigError`` (P-BUF-6).
    """

    accepts_trajectories: ClassVar[bool] = True

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """Every sample of the buffer; the component's objective is ``cross_entropy``."""
        return JobData(data_id, tuple(samples), metadata={"objective": "cross_entropy"})
