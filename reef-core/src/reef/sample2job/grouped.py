"""The default weight recipe's job data: :class:`GroupedJobData`, GRPO-style.

Its record-to-sample stage (:class:`reef.record2sample.grouped.GroupedReportSamples`) puts
reports in comparison groups. The job data is the buffer's samples, each member carrying its
group id, so the step objective can compare rewards within a group. Nothing numeric happens
here: advantages and the loss belong to the objective (P-STG-15).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from reef.core.job_data import JobData, Sample
from reef.sample2job.stage import Sample2Job


class GroupedJobData(Sample2Job):
    """The default weight recipe's sample-to-job stage: the buffer's samples, with groups.

    A weight recipe: the deployment must set ``job_samples`` (P-SIZE-2). It takes uploaded
    trajectories, which train as groups of one.
    """

    accepts_trajectories: ClassVar[bool] = True

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """Every sample, each keeping the group the store gave it (P-STG-3)."""
        return JobData(data_id, tuple(samples), metadata={"objective": "group_relative"})
