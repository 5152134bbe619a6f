"""The stages of the default weight recipe, ``grouped``.

- :class:`GroupedReportSamples`, the record-to-sample stage: reports name their comparison group
  in ``metadata.group`` (and may name a slot in ``metadata.slot``); a group trains when it holds
  ``group_size`` reports (:class:`ReportGroups` is its grouping).
- :class:`GroupedJobData`, the sample-to-job stage: the job data is the buffer's samples, each
  member carrying its group id, so the step objective can compare rewards within a group.
  Nothing numeric happens here: advantages and the loss belong to the objective (P-STG-15).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar, Self

import attrs

from reef.core.config import config_option
from reef.core.job_data import JobData, Sample
from reef.core.plugins import PluginSettings, Record2SampleSettings
from reef.pipeline_context import StageBuild
from reef.record2sample.record_sets import ReportContext
from reef.record2sample.reports import GroupDecision, ReportGrouping, ReportSamples
from reef.sample2job.stage import Sample2Job

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


class ReportGroups(ReportGrouping):
    """Groups reports by ``metadata.group``; a group is ready at ``group_size`` members.

    A report without a group trains by itself.
    """

    def __init__(self, group_size: int) -> None:
        self.group_size = group_size

    def placement(self, context: ReportContext) -> tuple[Hashable | None, str | None]:
        """``(metadata.group, metadata.slot)``."""
        metadata = context.report.metadata
        group, slot = metadata.get(GROUP_KEY), metadata.get(SLOT_KEY)
        return (
            None if group is None else str(group),
            None if slot is None else str(slot),
        )

    def decide(self, key: Hashable, members: tuple[ReportContext, ...]) -> GroupDecision:
        """READY at ``group_size`` members, INCOMPLETE before."""
        del key
        return GroupDecision.READY if len(members) >= self.group_size else GroupDecision.INCOMPLETE


class GroupedReportSamples(ReportSamples[GroupedReportSamplesSettings]):
    """The default weight recipe's record-to-sample stage: reports in comparison groups."""

    Settings: ClassVar[type[PluginSettings]] = GroupedReportSamplesSettings

    @classmethod
    def from_settings(cls, settings: GroupedReportSamplesSettings, build: StageBuild) -> Self:
        """The stage with :class:`ReportGroups` of the configured ``group_size``."""
        grouping = ReportGroups(settings.group_size)
        return cls(build.context, grouping, max_staleness=settings.max_staleness)


class GroupedJobData(Sample2Job):
    """The default weight recipe's sample-to-job stage: the buffer's samples, with groups.

    A weight recipe: the deployment must set ``job_samples`` (P-SIZE-2). It takes uploaded
    trajectories, which train as groups of one.
    """

    accepts_trajectories: ClassVar[bool] = True

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """Every sample, each keeping the group the store gave it (P-STG-3)."""
        return JobData(data_id, tuple(samples), metadata={"objective": "group_relative"})
