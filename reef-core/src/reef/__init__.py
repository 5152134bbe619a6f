"""Reef: record agent traffic, link it into trajectories, and turn feedback into training jobs.

This module is the public API: everything a plugin or recipe author imports, and nothing else.
Write ``from reef import ReportSamples, hookimpl``; the modules these names live in may move
between releases, the names here do not. ``docs/plugins.md`` lists them with what each is for,
and ``reef.testing`` holds what a recipe's own tests need.

- **A plugin**: :data:`hookimpl` marks hook implementations (the hooks are documented in
  :mod:`reef.hookspecs`); a discovery hook gets a :class:`PluginRegistrar` of one
  :class:`PluginKind`.
- **Settings**: a stage's keys are a frozen attrs class extending :class:`PluginSettings`
  (:class:`NoSettings`, :class:`Record2SampleSettings`, :class:`Sample2JobSettings`), fields
  made with :func:`config_option`; a bad config raises :class:`PluginConfigError`.
- **A recipe**: :class:`Recipe` names its stages in a :class:`PipelineSpec` and may refuse a
  deployment's :class:`PipelineSection` its objective cannot train with.
- **The record-to-sample stage**: :class:`Record2Sample` and the built-ins to extend
  (:class:`NoSamples`, :class:`TrajectorySamples`, :class:`ReportSamples` with its
  :class:`ReportGrouping`, :class:`GroupedReportSamples`, :class:`JudgedSamples` with its
  :class:`RecordJudging`), the record sets and units it forms, :class:`SampleAssembly`.
- **The sample-to-job stage**: :class:`Sample2Job` (:class:`GroupedJobData`), shaping samples
  into :class:`JobData`; :func:`validate_job_data` is the trainer's check of it;
  :class:`AdvantageSettings` names the advantage estimator a job's data asks the component for.
- **Values**: records (:data:`Record`), samples (:data:`Sample`), :class:`JobData`,
  :class:`JobOutcome`, and the :class:`PipelineContext` every stage reads.
- **Generated tasks**: :class:`GeneratedTaskRecipe` trains on the tasks of a
  :class:`TaskGenerator` (a :class:`TaskGenerationRequest` in, :class:`HarborTask` values out,
  a :class:`TaskValidationResult` per task, :data:`GeneratedTaskResult` values back); its
  stages are :class:`GeneratedTaskSamples` and :class:`GeneratedTaskJobData`. A generator
  runs its tasks through the generator service with a :class:`GeneratorClient` (plays by an
  :class:`AnswerAgent`).
- **Errors**: every error Reef raises derives from :class:`ReefError`.
- **Embedding**: :class:`Plugins` loads the installed plugins; :func:`load_deployment` reads a
  deployment file with them.

Importing ``reef`` is cheap: each name loads its module when first used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from reef.version import __version__

if TYPE_CHECKING:
    from reef.components.advantages import AdvantageSettings
    from reef.components.job_parameters import DistillationParameters, TeacherSettings
    from reef.containers.agent import AnswerAgent
    from reef.core.config import config_option
    from reef.core.deployment import DeploymentError, PipelineSection
    from reef.core.harbor import HarborTask, HarborTaskError
    from reef.core.job_data import (
        JobData,
        JobOutcome,
        Sample,
        SampleKind,
        TaskSample,
        TrainingInstruction,
        TrajectorySample,
    )
    from reef.core.plugins import (
        NoSettings,
        PluginConfigError,
        PluginSettings,
        RecipeConfigError,
        Record2SampleSettings,
    )
    from reef.core.records import JSON, InferenceRecord, JudgedRecord, Judgment, Record, Report
    from reef.core.task_stores import KeyValueStore, TaskStores
    from reef.core.trajectory_index import TrajectoryIndex
    from reef.errors import ReefError
    from reef.hookspecs import hookimpl
    from reef.pipeline_context import PipelineContext, TrainingMode
    from reef.plugins.manager import Plugins
    from reef.plugins.registrar import (
        PluginError,
        PluginKind,
        PluginRegistrar,
        UnknownPluginError,
    )
    from reef.plugins.scenarios import load_deployment
    from reef.recipe import PipelineSpec, Recipe
    from reef.recipe.generated_tasks import (
        FailedTask,
        GeneratedTaskRecipe,
        GeneratedTaskResult,
        HeldOutTask,
        RejectedTask,
        RolledOutTask,
        TaskGenerator,
        TaskValidationResult,
    )
    from reef.record2sample.assembly import SampleAssembly
    from reef.record2sample.distill import (
        DistillSamples,
        DistillSamplesSettings,
        compose_teacher_request,
        with_teacher,
    )
    from reef.record2sample.generated_tasks import (
        GeneratedTaskSamples,
        GeneratedTaskSamplesSettings,
    )
    from reef.record2sample.generator import TaskGenerationRequest
    from reef.record2sample.generator.client import GeneratorClient, GeneratorServiceError
    from reef.record2sample.grouped import (
        GroupedReportSamples,
        GroupedReportSamplesSettings,
        ReportGroups,
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
    from reef.record2sample.reports import (
        GroupDecision,
        ReportGrouping,
        ReportSamples,
        SkippedReport,
    )
    from reef.record2sample.stage import Record2Sample
    from reef.record2sample.traces import TraceSamples
    from reef.record2sample.trajectories import TrajectorySamples, TrajectorySamplesSettings
    from reef.record2sample.worker import BackgroundJobWorker
    from reef.sample2job.distill import DistillJobData
    from reef.sample2job.generated_tasks import GeneratedTaskJobData
    from reef.sample2job.grouped import GroupedJobData
    from reef.sample2job.stage import Sample2Job, Sample2JobSettings
    from reef.sample2job.traces import TraceJobData, TrainTaskJobData
    from reef.sample2job.validation import JobDataError, validate_job_data

# Where each public name lives; read by __getattr__ the first time a name is used.
_HOMES: dict[str, str] = {
    # writing a plugin
    "hookimpl": "reef.hookspecs",
    "PluginKind": "reef.plugins.registrar",
    "PluginRegistrar": "reef.plugins.registrar",
    # settings
    "NoSettings": "reef.core.plugins",
    "PluginSettings": "reef.core.plugins",
    "Record2SampleSettings": "reef.core.plugins",
    "config_option": "reef.core.config",
    # recipes and the context their stages read
    "PipelineContext": "reef.pipeline_context",
    "PipelineSection": "reef.core.deployment",
    "PipelineSpec": "reef.recipe",
    "Recipe": "reef.recipe",
    "TrainingMode": "reef.pipeline_context",
    "KeyValueStore": "reef.core.task_stores",
    "TaskStores": "reef.core.task_stores",
    # generated tasks: the recipe, the generator contract, its values and stages
    "FailedTask": "reef.recipe.generated_tasks",
    "GeneratedTaskJobData": "reef.sample2job.generated_tasks",
    "GeneratedTaskRecipe": "reef.recipe.generated_tasks",
    "GeneratedTaskResult": "reef.recipe.generated_tasks",
    "GeneratedTaskSamples": "reef.record2sample.generated_tasks",
    "GeneratedTaskSamplesSettings": "reef.record2sample.generated_tasks",
    "HarborTask": "reef.core.harbor",
    "HeldOutTask": "reef.recipe.generated_tasks",
    "RejectedTask": "reef.recipe.generated_tasks",
    "RolledOutTask": "reef.recipe.generated_tasks",
    "TaskGenerationRequest": "reef.record2sample.generator",
    "TaskGenerator": "reef.recipe.generated_tasks",
    "TaskValidationResult": "reef.recipe.generated_tasks",
    # harness evolution
    "TraceJobData": "reef.sample2job.traces",
    "TraceSamples": "reef.record2sample.traces",
    "TrainTaskJobData": "reef.sample2job.traces",
    # running tasks: what a generator calls the generator service with
    "AnswerAgent": "reef.containers.agent",
    "GeneratorClient": "reef.record2sample.generator.client",
    # the record-to-sample stage
    "BackgroundJobWorker": "reef.record2sample.worker",
    "DistillSamples": "reef.record2sample.distill",
    "DistillSamplesSettings": "reef.record2sample.distill",
    "compose_teacher_request": "reef.record2sample.distill",
    "with_teacher": "reef.record2sample.distill",
    "GroupDecision": "reef.record2sample.reports",
    "GroupedReportSamples": "reef.record2sample.grouped",
    "GroupedReportSamplesSettings": "reef.record2sample.grouped",
    "JudgedSamples": "reef.record2sample.judged",
    "NoSamples": "reef.record2sample.no_samples",
    "Record2Sample": "reef.record2sample.stage",
    "RecordJudging": "reef.record2sample.judged",
    "RecordSet": "reef.record2sample.record_sets",
    "RecordSetUnit": "reef.record2sample.record_sets",
    "ReportContext": "reef.record2sample.record_sets",
    "ReportGrouping": "reef.record2sample.reports",
    "ReportGroups": "reef.record2sample.grouped",
    "ReportSamples": "reef.record2sample.reports",
    "SampleAssembly": "reef.record2sample.assembly",
    "SampleResult": "reef.record2sample.record_sets",
    "SampleStatus": "reef.record2sample.record_sets",
    "SkippedReport": "reef.record2sample.reports",
    "TrajectorySamples": "reef.record2sample.trajectories",
    "TrajectorySamplesSettings": "reef.record2sample.trajectories",
    # the objective a distilling recipe configures
    "DistillationParameters": "reef.components.job_parameters",
    "TeacherSettings": "reef.components.job_parameters",
    # the sample-to-job stage
    "DistillJobData": "reef.sample2job.distill",
    "GroupedJobData": "reef.sample2job.grouped",
    "Sample2Job": "reef.sample2job.stage",
    "Sample2JobSettings": "reef.sample2job.stage",
    "validate_job_data": "reef.sample2job.validation",
    "AdvantageSettings": "reef.components.advantages",
    # values
    "JSON": "reef.core.records",
    "TrajectoryIndex": "reef.core.trajectory_index",
    "InferenceRecord": "reef.core.records",
    "JobData": "reef.core.job_data",
    "JobOutcome": "reef.core.job_data",
    "JudgedRecord": "reef.core.records",
    "Judgment": "reef.core.records",
    "Record": "reef.core.records",
    "Report": "reef.core.records",
    "Sample": "reef.core.job_data",
    "SampleKind": "reef.core.job_data",
    "TaskSample": "reef.core.job_data",
    "TrainingInstruction": "reef.core.job_data",
    "TrajectorySample": "reef.core.job_data",
    # errors
    "DeploymentError": "reef.core.deployment",
    "GeneratorServiceError": "reef.record2sample.generator.client",
    "HarborTaskError": "reef.core.harbor",
    "JobDataError": "reef.sample2job.validation",
    "MissingScore": "reef.record2sample.record_sets",
    "PluginConfigError": "reef.core.plugins",
    "PluginError": "reef.plugins.registrar",
    "RecipeConfigError": "reef.core.plugins",
    "RecordSetError": "reef.record2sample.record_sets",
    "RecordSetOverlap": "reef.record2sample.record_sets",
    "ReefError": "reef.errors",
    "ReportError": "reef.record2sample.record_sets",
    "UnknownPluginError": "reef.plugins.registrar",
    # embedding: the installed plugins and a deployment read with them
    "Plugins": "reef.plugins.manager",
    "load_deployment": "reef.plugins.scenarios",
}

__all__ = [
    "JSON",
    "AdvantageSettings",
    "AnswerAgent",
    "BackgroundJobWorker",
    "DeploymentError",
    "DistillJobData",
    "DistillSamples",
    "DistillSamplesSettings",
    "DistillationParameters",
    "FailedTask",
    "GeneratedTaskJobData",
    "GeneratedTaskRecipe",
    "GeneratedTaskResult",
    "GeneratedTaskSamples",
    "GeneratedTaskSamplesSettings",
    "GeneratorClient",
    "GeneratorServiceError",
    "GroupDecision",
    "GroupedJobData",
    "GroupedReportSamples",
    "GroupedReportSamplesSettings",
    "HarborTask",
    "HarborTaskError",
    "HeldOutTask",
    "InferenceRecord",
    "JobData",
    "JobDataError",
    "JobOutcome",
    "JudgedRecord",
    "JudgedSamples",
    "Judgment",
    "KeyValueStore",
    "MissingScore",
    "NoSamples",
    "NoSettings",
    "PipelineContext",
    "PipelineSection",
    "PipelineSpec",
    "PluginConfigError",
    "PluginError",
    "PluginKind",
    "PluginRegistrar",
    "PluginSettings",
    "Plugins",
    "Recipe",
    "RecipeConfigError",
    "Record",
    "Record2Sample",
    "Record2SampleSettings",
    "RecordJudging",
    "RecordSet",
    "RecordSetError",
    "RecordSetOverlap",
    "RecordSetUnit",
    "ReefError",
    "RejectedTask",
    "Report",
    "ReportContext",
    "ReportError",
    "ReportGrouping",
    "ReportGroups",
    "ReportSamples",
    "RolledOutTask",
    "Sample",
    "Sample2Job",
    "Sample2JobSettings",
    "SampleAssembly",
    "SampleKind",
    "SampleResult",
    "SampleStatus",
    "SkippedReport",
    "TaskGenerationRequest",
    "TaskGenerator",
    "TaskSample",
    "TaskStores",
    "TaskValidationResult",
    "TeacherSettings",
    "TraceJobData",
    "TraceSamples",
    "TrainTaskJobData",
    "TrainingInstruction",
    "TrainingMode",
    "TrajectoryIndex",
    "TrajectorySample",
    "TrajectorySamples",
    "TrajectorySamplesSettings",
    "UnknownPluginError",
    "__version__",
    "compose_teacher_request",
    "config_option",
    "hookimpl",
    "load_deployment",
    "validate_job_data",
    "with_teacher",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'reef' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # the next use finds it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
