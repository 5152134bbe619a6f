"""The names of ``reef.sample2job`` (``__init__.py`` says how they load): read by type checkers
and by the lazy loader alike."""

from .stage import (
    Sample2Job as Sample2Job,
    Sample2JobSettings as Sample2JobSettings,
)
from .validation import (
    JobDataError as JobDataError,
    validate_job_data as validate_job_data,
)
