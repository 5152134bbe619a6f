"""Sample-to-job stages: :class:`Sample2Job` and the built-in job-data stages.

A recipe's sample-to-job stage extends :class:`Sample2Job` and implements ``make_job_data``;
the core's default weight recipe uses :class:`reef.recipe.grouped.processor.GroupedJobData`.
:func:`validate_job_data` is the trainer's check of a stage's job data against its
``output_schema``, for a recipe's tests too.
"""

from reef.sample2job.stage import Sample2Job, Sample2JobSettings
from reef.sample2job.validation import JobDataError, validate_job_data

__all__ = [
    "JobDataError",
    "Sample2Job",
    "Sample2JobSettings",
    "validate_job_data",
]
