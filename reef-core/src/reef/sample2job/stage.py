"""The sample-to-job stage: :class:`Sample2Job`, the base of every such stage (P-STG-3, 4).

The stage shapes the buffer's samples into one :class:`JobData` (``make_job_data``) and says how
big a job is: ``job_samples``, the fewest samples one job trains, and ``buffer_size``, the most
samples a job takes from the buffer beside the rest of a group (P-SIZE-*, P-BUF-6). Its class
attributes tell the pipeline what it takes: uploaded trajectories, imported tasks, instructions,
and which training modes it supports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic, Self

import attrs
from typing_extensions import TypeVar

from reef.core.config import config_option
from reef.core.job_data import JobData, Sample, SampleKind, job_data_schema
from reef.core.plugins import PluginConfigError, PluginSettings, RecipeConfigError
from reef.core.records import JSON
from reef.pipeline_context import TRAINING_MODES, JobStageBuild, PipelineContext, TrainingMode
from reef.record2sample.stage import Record2Sample


@attrs.frozen
class Sample2JobSettings(PluginSettings):
    """The job size keys every sample-to-job stage takes."""

    job_samples: int | None = config_option(
        default=None,
        help=(
            "the fewest samples one training job trains; usually the component's batch size,"
            " so that one job is one optimizer step"
        ),
        validator=attrs.validators.optional(attrs.validators.gt(0)),
    )
    buffer_size: int | None = config_option(
        default=None,
        help="the most samples one job takes from the buffer (default: job_samples)",
        validator=attrs.validators.optional(attrs.validators.gt(0)),
    )


#: A sample-to-job stage's settings class, what its :meth:`Sample2Job.from_settings` receives,
#: typed (``class MyJobData(Sample2Job[MyJobSettings])``).
JobSettingsT = TypeVar("JobSettingsT", bound="Sample2JobSettings", default="Sample2JobSettings")


class Sample2Job(Generic[JobSettingsT]):
    """The base of a sample-to-job stage; a recipe implements :meth:`make_job_data`.

    :param context: the pipeline's context.
    :param job_samples: the fewest samples of one job, a positive int (P-SIZE-1).
    :param buffer_size: the most samples a job takes from the buffer; default ``job_samples``,
        refused below it (P-BUF-6).
    :param max_job_samples: for a stage whose job data is one fixed unit: a larger
        ``job_samples`` is refused (P-SIZE-4).
    :raises PluginConfigError: for a refused ``job_samples`` or ``buffer_size``.
    """

    #: Extension point: the settings class that declares this stage's keys; an extension of
    #: :class:`Sample2JobSettings`. So are the class attributes below: what the stage takes.
    Settings: ClassVar[type[Sample2JobSettings]] = Sample2JobSettings

    #: ``job_samples`` when the config sets none; ``None`` for a weight recipe, whose
    #: deployment must set it (P-SIZE-2). Harness evolution stages set 1 (P-SIZE-3).
    default_job_samples: ClassVar[int | None] = None
    #: The stage takes uploaded trajectories (P-UP-3).
    accepts_trajectories: ClassVar[bool] = False
    #: Imported train tasks enter the buffer (P-BUF-2).
    accepts_imported_tasks: ClassVar[bool] = False
    #: A manual instruction runs at once, even with an empty manual buffer (P-MODE-6).
    reads_instructions: ClassVar[bool] = False
    #: The training modes the stage supports (P-MODE-1).
    supported_training_modes: ClassVar[frozenset[TrainingMode]] = frozenset(TRAINING_MODES)
    #: The sample kinds the recipe gives job parameters for; in auto, a buffer of another kind
    #: waits for an instruction that gives them (P-BUF-3).
    job_parameter_kinds: ClassVar[frozenset[SampleKind]] = frozenset({"trajectory"})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not (isinstance(cls.Settings, type) and issubclass(cls.Settings, Sample2JobSettings)):
            raise TypeError(
                f"{cls.__name__}.Settings must extend Sample2JobSettings (it reads job_samples"
                f" and buffer_size), not {cls.Settings!r}"
            )

    def __init__(
        self,
        context: PipelineContext,
        *,
        job_samples: int,
        buffer_size: int | None = None,
        max_job_samples: int | None = None,
    ) -> None:
        plugin = type(self).__name__
        if job_samples < 1:
            raise PluginConfigError(
                plugin, "$.job_samples", f"must be a positive int, got {job_samples}"
            )
        if max_job_samples is not None and job_samples > max_job_samples:
            raise PluginConfigError(
                plugin,
                "$.job_samples",
                f"{job_samples} is more than this stage's job data holds ({max_job_samples}):"
                f" set job_samples to at most {max_job_samples}",
            )
        if buffer_size is None:
            buffer_size = job_samples
        if buffer_size < job_samples:
            raise PluginConfigError(
                plugin,
                "$.buffer_size",
                f"{buffer_size} is smaller than job_samples ({job_samples}): set buffer_size to"
                f" at least {job_samples}, or leave it out (it defaults to job_samples)",
            )
        self.context = context
        self.job_samples = job_samples
        self.buffer_size = buffer_size
        self.max_job_samples = max_job_samples

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | None,
        *,
        context: PipelineContext,
        record2sample: Record2Sample,
        environ: Mapping[str, str],
    ) -> Self:
        """Build the stage from its deployment config (P-STG-8, P-STG-10).

        Parses ``config`` with the stage's :attr:`Settings` class (:class:`Sample2JobSettings`
        or an extension of it) and builds the stage with :meth:`from_settings`. A stage declares
        its keys by setting ``Settings``; it does not override this method.

        :raises reef.core.plugins.RecipeConfigError: a weight recipe's config sets no
            ``job_samples`` (P-SIZE-2).
        :raises reef.core.plugins.PluginConfigError: naming every problem of ``config``.
        """
        settings: Any = cls.Settings.parse(config, plugin_class=cls)  # an instance of Settings
        build = JobStageBuild(context, environ, record2sample=record2sample)
        return cls.from_settings(settings, build)

    @classmethod
    def from_settings(cls, settings: JobSettingsT, build: JobStageBuild) -> Self:
        """Extension point: build the stage from its parsed settings (an instance of
        :attr:`Settings`, typed by the class's parameter: ``Sample2Job[MyJobSettings]``).

        The default calls the constructor with each settings field as a keyword argument,
        ``job_samples`` resolved (:meth:`resolve_job_samples`) and, for a stage whose job data
        is one fixed unit, ``max_job_samples`` from :meth:`max_job_samples_for` (P-SIZE-4).
        Override it when the constructor takes something else, for example a value that
        ``build.record2sample`` owns (P-STG-9).
        """
        keywords = settings.as_keywords()
        keywords["job_samples"] = cls.resolve_job_samples(settings)
        limit = cls.max_job_samples_for(build.record2sample)
        if limit is not None:
            keywords["max_job_samples"] = limit
        return cls(build.context, **keywords)

    @classmethod
    def max_job_samples_for(cls, record2sample: Record2Sample) -> int | None:
        """Extension point for a stage whose job data is one fixed unit (the TTTD and SDPO
        step grid): the most samples one job can hold, read from the record-to-sample stage
        that makes the unit. A larger ``job_samples`` is then refused (P-SIZE-4). The default,
        ``None``, sets no limit.
        """
        del record2sample
        return None

    @classmethod
    def resolve_job_samples(cls, settings: Sample2JobSettings) -> int:
        """The config's ``job_samples``, or the stage's default.

        :raises RecipeConfigError: when neither is set (a weight recipe, P-SIZE-2).
        """
        if settings.job_samples is not None:
            return settings.job_samples
        if cls.default_job_samples is None:
            raise RecipeConfigError(
                cls.__name__,
                "$.job_samples",
                "a weight recipe has no default job_samples: set"
                " pipeline.sample2job.config.job_samples (usually the component's batch size)",
            )
        return cls.default_job_samples

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """Extension point: the job data of ``samples`` (the buffer's, in store order) with id
        ``data_id``.

        Must not call models or train (P-MODE-9). The job's commit consumes every sample given
        here, including ones the recipe leaves out of training (P-REP-6).
        """
        raise NotImplementedError(f"{type(self).__name__} does not implement make_job_data")

    @property
    def output_schema(self) -> JSON:
        """Extension point: the JSON Schema the trainer validates this stage's job data against
        (P-PIPE-7)."""
        kinds = [k for k in ("trajectory", "task") if k in self.job_parameter_kinds] or None
        return job_data_schema(kinds) if kinds else job_data_schema()

    def status(self) -> JSON:
        """Extension point: the stage's status entries (P-BUF-8); the base adds none."""
        return {}

    def metrics(self) -> dict[str, float]:
        """Extension point: the stage's metrics, by name; the base has none."""
        return {}

    def close(self, timeout: float | None = None) -> None:
        """Extension point: release what the stage holds; the base holds nothing."""
        del timeout
