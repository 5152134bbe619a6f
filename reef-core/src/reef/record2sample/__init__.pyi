"""The names of ``reef.record2sample`` (``__init__.py`` says how they load): read by type checkers
and by the lazy loader alike."""

from .assembly import SampleAssembly as SampleAssembly
from .distill import (
    DistillSamples as DistillSamples,
    DistillSamplesSettings as DistillSamplesSettings,
    compose_teacher_request as compose_teacher_request,
    with_teacher as with_teacher,
)
from .judged import (
    JudgedSamples as JudgedSamples,
    RecordJudging as RecordJudging,
)
from .no_samples import NoSamples as NoSamples
from .record_sets import (
    MissingScore as MissingScore,
    RecordSet as RecordSet,
    RecordSetError as RecordSetError,
    RecordSetOverlap as RecordSetOverlap,
    RecordSetUnit as RecordSetUnit,
    ReportContext as ReportContext,
    ReportError as ReportError,
    SampleResult as SampleResult,
    SampleStatus as SampleStatus,
)
from .reports import (
    GroupDecision as GroupDecision,
    ReportGrouping as ReportGrouping,
    ReportSamples as ReportSamples,
    SkippedReport as SkippedReport,
)
from .stage import Record2Sample as Record2Sample
from .trajectories import (
    TrajectorySamples as TrajectorySamples,
    TrajectorySamplesSettings as TrajectorySamplesSettings,
)
from .worker import (
    BackgroundJobWorker as BackgroundJobWorker,
    FinishedJob as FinishedJob,
)
