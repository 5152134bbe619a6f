"""Sample-to-job stages: :class:`Sample2Job` and the built-in job-data stages.

A recipe's sample-to-job stage extends :class:`Sample2Job` and implements ``make_job_data``;
the core's default weight recipe uses :class:`GroupedJobData`.
"""

from reef.sample2job.grouped import GroupedJobData, GroupedReportSamples, ReportGroups
from reef.sample2job.stage import Sample2Job, Sample2JobSettings

__all__ = [
    "GroupedJobData",
    "GroupedReportSamples",
    "ReportGroups",
    "Sample2Job",
    "Sample2JobSettings",
]
