"""The stages of the default weight recipe, ``grouped``.

- :class:`GroupedReportSamples`, the record-to-sample stage: reports name their comparison group
  in ``metadata.group`` (and may name a slot in ``metadata.slot``); a group trains when it holds
  ``group_size`` reports (:class:`ReportGroups` is its grouping). With ``dynamic_sampling``
  (DAPO's), a complete group whose scores all tie never becomes samples: its reports end
  counted as ``no_signal`` (in the stage's ``ended_records``), so jobs fill with groups that
  have a signal. With ``train_sampled_tokens`` each sample keeps the tokens the engine sampled,
  and the component trains those rather than a re-encoding of the reply's text.
- :class:`GroupedJobData`, the sample-to-job stage: the job data is the buffer's samples, each
  member carrying its group id, so the step objective can compare rewards within a group, and
  the advantage estimator (``advantage``: ``group_mean`` by default, ``std_normalisation`` for
  GRPO's scaling) in its metadata. Nothing numeric happens here: advantages and the loss
  belong to the objective (P-STG-15).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar, Self

import attrs

from reef.components.advantages import AdvantageSettings
from reef.core.config import config_option
from reef.core.job_data import JobData, Sample
from reef.core.plugins import PluginSettings, Record2SampleSettings
from reef.pipeline_context import PipelineContext, StageBuild
from reef.record2sample.record_sets import ReportContext
from reef.record2sample.reports import GroupDecision, ReportGrouping, ReportSamples
from reef.sample2job.stage import Sample2Job, Sample2JobSettings

#: The report metadata keys the grouping reads.
GROUP_KEY = "group"
SLOT_KEY = "slot"


@attrs.frozen
class GroupedReportSamplesSettings(Record2SampleSettings):
    """``GroupedReportSamples``' keys: the group size beside ``max_staleness``."""

    group_size: int = config_option(
        default=4,
        help="how many reports of one comparison group (metadata.group) train together",
        validator=attrs.validators.gt(0),
    )
    dynamic_sampling: bool = config_option(
        default=False,
        help="DAPO's dynamic sampling: a complete group whose scores all tie does not train; its"
        " reports end counted as no_signal",
    )
    train_sampled_tokens: bool = config_option(
        default=False,
        help="keep the token ids and log probabilities the engine sampled (the local engine,"
        " vLLM and SGLang return them) in each sample, so the component trains exactly those;"
        " off, a sample holds no tokens and the component renders its text again",
    )


class ReportGroups(ReportGrouping):
    """Groups reports by ``metadata.group``; a group is ready at ``group_size`` members.

    A report without a group trains by itself.

    :param dynamic_sampling: a complete group whose scores all tie is decided
        :attr:`GroupDecision.NO_SIGNAL`.
    """

    def __init__(self, group_size: int, *, dynamic_sampling: bool = False) -> None:
        self.group_size = group_size
        self.dynamic_sampling = dynamic_sampling

    def placement(self, context: ReportContext) -> tuple[Hashable | None, str | None]:
        """``(metadata.group, metadata.slot)``."""
        metadata = context.report.metadata
        group, slot = metadata.get(GROUP_KEY), metadata.get(SLOT_KEY)
        return (
            None if group is None else str(group),
            None if slot is None else str(slot),
        )

    def decide(self, key: Hashable, members: tuple[ReportContext, ...]) -> GroupDecision:
        """READY at ``group_size`` members (NO_SIGNAL under dynamic sampling when their scores
        all tie), INCOMPLETE before."""
        del key
        if len(members) < self.group_size:
            return GroupDecision.INCOMPLETE
        if self.dynamic_sampling and len({m.report.score for m in members}) == 1:
            return GroupDecision.NO_SIGNAL
        return GroupDecision.READY


class GroupedReportSamples(ReportSamples[GroupedReportSamplesSettings]):
    """The default weight recipe's record-to-sample stage: reports in comparison groups."""

    Settings: ClassVar[type[PluginSettings]] = GroupedReportSamplesSettings

    @classmethod
    def from_settings(cls, settings: GroupedReportSamplesSettings, build: StageBuild) -> Self:
        """The stage with :class:`ReportGroups` of the configured ``group_size``, keeping the
        sampled tokens with ``train_sampled_tokens``."""
        grouping = ReportGroups(settings.group_size, dynamic_sampling=settings.dynamic_sampling)
        stage = cls(build.context, grouping, max_staleness=settings.max_staleness)
        stage.keep_tokens = settings.train_sampled_tokens
        return stage


@attrs.frozen
class GroupedJobDataSettings(Sample2JobSettings):
    """The job size keys and the advantage estimator."""

    advantage: AdvantageSettings = config_option(
        factory=AdvantageSettings,
        help="the estimator the component computes advantages with: group_mean (with "
        "std_normalisation: GRPO's scaling by the group's standard deviation), entropic or none",
    )


class GroupedJobData(Sample2Job):
    """The default weight recipe's sample-to-job stage: the buffer's samples, with groups.

    A weight recipe: the deployment must set ``job_samples`` (P-SIZE-2). It takes uploaded
    trajectories, which train as groups of one.

    :param advantage: written into each job data's metadata for the component.
    """

    Settings: ClassVar[type[Sample2JobSettings]] = GroupedJobDataSettings
    accepts_trajectories: ClassVar[bool] = True

    def __init__(
        self,
        context: PipelineContext,
        *,
        job_samples: int,
        buffer_size: int | None = None,
        max_job_samples: int | None = None,
        advantage: AdvantageSettings | None = None,
    ) -> None:
        super().__init__(
            context,
            job_samples=job_samples,
            buffer_size=buffer_size,
            max_job_samples=max_job_samples,
        )
        self.advantage = advantage or AdvantageSettings()

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """Every sample, each keeping the group the store gave it (P-STG-3), and the
        advantage estimator."""
        metadata = {"objective": "group_relative", "advantage": self.advantage.as_keywords()}
        return JobData(data_id, tuple(samples), metadata=metadata)
