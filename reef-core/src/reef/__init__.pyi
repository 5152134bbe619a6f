"""The names of the public API (``reef/__init__.py`` says how they load): one list, read by type
checkers and by the lazy loader alike. Add a name here, and to ``docs/plugins.md``."""

from .components.advantages import AdvantageSettings as AdvantageSettings
from .components.job_parameters import (
    DistillationParameters as DistillationParameters,
    FullLogitDistillation as FullLogitDistillation,
    TeacherSettings as TeacherSettings,
)
from .containers.agent import AnswerAgent as AnswerAgent
from .core.config import config_option as config_option
from .core.deployment import PipelineSection as PipelineSection
from .core.harbor import HarborTask as HarborTask, HarborTaskError as HarborTaskError
from .core.job_data import (
    JobData as JobData,
    JobOutcome as JobOutcome,
    Sample as Sample,
    SampleKind as SampleKind,
    TaskSample as TaskSample,
    TrainingInstruction as TrainingInstruction,
    TrajectorySample as TrajectorySample,
)
from .core.plugins import (
    NoSettings as NoSettings,
    PluginConfigError as PluginConfigError,
    PluginSettings as PluginSettings,
    RecipeConfigError as RecipeConfigError,
    Record2SampleSettings as Record2SampleSettings,
)
from .core.records import (
    JSON as JSON,
    InferenceRecord as InferenceRecord,
    JudgedRecord as JudgedRecord,
    Judgment as Judgment,
    Record as Record,
    Report as Report,
)
from .core.task_stores import KeyValueStore as KeyValueStore, TaskStores as TaskStores
from .core.trajectory_index import TrajectoryIndex as TrajectoryIndex
from .errors import ReefError as ReefError
from .hookspecs import hookimpl as hookimpl
from .pipeline_context import (
    JobStageBuild as JobStageBuild,
    PipelineContext as PipelineContext,
    StageBuild as StageBuild,
    TrainingMode as TrainingMode,
)
from .plugins.registrar import (
    PluginError as PluginError,
    PluginKind as PluginKind,
    PluginRegistrar as PluginRegistrar,
    UnknownPluginError as UnknownPluginError,
)
from .recipe import PipelineSpec as PipelineSpec, Recipe as Recipe
from .recipe.generated_tasks import (
    FailedTask as FailedTask,
    GeneratedTaskRecipe as GeneratedTaskRecipe,
    GeneratedTaskResult as GeneratedTaskResult,
    HeldOutTask as HeldOutTask,
    RejectedTask as RejectedTask,
    RolledOutTask as RolledOutTask,
    TaskGenerator as TaskGenerator,
    TaskValidationResult as TaskValidationResult,
)
from .recipe.generated_tasks.processor import (
    GeneratedTaskJobData as GeneratedTaskJobData,
    GeneratedTaskSamples as GeneratedTaskSamples,
    GeneratedTaskSamplesSettings as GeneratedTaskSamplesSettings,
)
from .recipe.grouped.processor import (
    GroupedJobData as GroupedJobData,
    GroupedReportSamples as GroupedReportSamples,
    GroupedReportSamplesSettings as GroupedReportSamplesSettings,
    ReportGroups as ReportGroups,
)
from .record2sample.assembly import (
    ResponseChains as ResponseChains,
    SampleAssembly as SampleAssembly,
)
from .record2sample.distill import (
    DistillSamples as DistillSamples,
    DistillSamplesSettings as DistillSamplesSettings,
    compose_teacher_request as compose_teacher_request,
    with_teacher as with_teacher,
)
from .record2sample.generator import TaskGenerationRequest as TaskGenerationRequest
from .record2sample.generator.client import (
    GeneratorClient as GeneratorClient,
    GeneratorServiceError as GeneratorServiceError,
)
from .record2sample.judged import JudgedSamples as JudgedSamples, RecordJudging as RecordJudging
from .record2sample.no_samples import NoSamples as NoSamples
from .record2sample.record_sets import (
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
from .record2sample.reports import (
    GroupDecision as GroupDecision,
    ReportGrouping as ReportGrouping,
    ReportSamples as ReportSamples,
    SkippedReport as SkippedReport,
)
from .record2sample.stage import Record2Sample as Record2Sample
from .record2sample.traces import TraceSamples as TraceSamples
from .record2sample.trajectories import (
    TrajectorySamples as TrajectorySamples,
    TrajectorySamplesSettings as TrajectorySamplesSettings,
)
from .record2sample.worker import BackgroundJobWorker as BackgroundJobWorker
from .sample2job.distill import DistillJobData as DistillJobData
from .sample2job.stage import Sample2Job as Sample2Job, Sample2JobSettings as Sample2JobSettings
from .sample2job.traces import TraceJobData as TraceJobData, TrainTaskJobData as TrainTaskJobData
from .sample2job.validation import (
    JobDataError as JobDataError,
    validate_job_data as validate_job_data,
)
from .trackers import TrackedJob as TrackedJob, Tracker as Tracker
from .version import __version__ as __version__
