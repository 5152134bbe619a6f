"""Record-to-sample stages: :class:`Record2Sample`, record sets and units, and the built-ins.

A recipe's record-to-sample stage extends one of :class:`NoSamples`, :class:`TrajectorySamples`,
:class:`ReportSamples` (distilling: :class:`DistillSamples`; grouped:
:class:`reef.recipe.grouped.processor.GroupedReportSamples`) or :class:`JudgedSamples` (or
:class:`Record2Sample` itself). See ``docs/pipeline.md`` for a recipe author's walk through them.
"""

from reef.record2sample.assembly import SampleAssembly
from reef.record2sample.distill import (
    DistillSamples,
    DistillSamplesSettings,
    compose_teacher_request,
    with_teacher,
)
from reef.record2sample.judged import JudgedSamples, RecordJudging
from reef.record2sample.no_samples import NoSamples
from reef.record2sample.record_sets import (
    MissingScore,
    RecordSet,
    RecordSetError,
    RecordSetOverlap,
    RecordSetUnit,
    ReportContext,
    ReportError,
    SampleResult,
    SampleStatus,
)
from reef.record2sample.reports import GroupDecision, ReportGrouping, ReportSamples, SkippedReport
from reef.record2sample.stage import Record2Sample
from reef.record2sample.trajectories import TrajectorySamples, TrajectorySamplesSettings
from reef.record2sample.worker import BackgroundJobWorker, FinishedJob

__all__ = [
    "BackgroundJobWorker",
    "DistillSamples",
    "DistillSamplesSettings",
    "FinishedJob",
    "GroupDecision",
    "JudgedSamples",
    "MissingScore",
    "NoSamples",
    "Record2Sample",
    "RecordJudging",
    "RecordSet",
    "RecordSetError",
    "RecordSetOverlap",
    "RecordSetUnit",
    "ReportContext",
    "ReportError",
    "ReportGrouping",
    "ReportSamples",
    "SampleAssembly",
    "SampleResult",
    "SampleStatus",
    "SkippedReport",
    "TrajectorySamples",
    "TrajectorySamplesSettings",
    "compose_teacher_request",
    "with_teacher",
]
