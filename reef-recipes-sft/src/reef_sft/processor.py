"""The stages of SFT: ``SFTSamples`` (records to samples) and ``SFTJobData`` (samples to a job).

An SFT target is fixed text, not tokens the served model sampled, so no SFT sample is ever
stale: ``SFTSamples`` takes no ``max_staleness`` (it refuses every key) and ``is_stale`` is
always false.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Self

import attrs

from reef.core.config import config_option
from reef.core.job_data import Sample
from reef.core.plugins import NoSettings, PluginSettings
from reef.pipeline_context import PipelineContext
from reef.record2sample.stage import Record2Sample


class SFTSamples(Record2Sample):
    """The record-to-sample stage of SFT. It takes no config (:class:`NoSettings`)."""

    Settings: ClassVar[type[PluginSettings]] = NoSettings

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | None,
        *,
        context: PipelineContext,
        environ: Mapping[str, str],
    ) -> Self:
        """Refuse any key, ``max_staleness`` included, then build the stage."""
        del environ
        NoSettings.parse(config, plugin_class=cls)
        return cls(context)

    def is_stale(self, sample: Sample) -> bool:
        """Never: an SFT target is fixed text, whichever artifact was served."""
        del sample
        return False


@attrs.frozen
class SFTJobDataSettings(PluginSettings):
    """The job size of SFT: a weight recipe, so ``job_samples`` has no default."""

    job_samples: int = config_option(
        help="the fewest samples of one job; usually the component's batch size",
        validator=attrs.validators.gt(0),
    )
    buffer_size: int | None = config_option(
        default=None,
        help="the most samples one job takes from the buffer; job_samples when absent",
        validator=attrs.validators.optional(attrs.validators.gt(0)),
    )

    def __attrs_post_init__(self) -> None:
        if self.buffer_size is not None and self.buffer_size < self.job_samples:
            raise ValueError(
                f"buffer_size ({self.buffer_size}) is smaller than job_samples ({self.job_samples})"
            )


class SFTJobData:
    """The sample-to-job stage of SFT: its job size, parsed from the deployment."""

    Settings: ClassVar[type[PluginSettings]] = SFTJobDataSettings

    def __init__(self, settings: SFTJobDataSettings) -> None:
        self.job_samples = settings.job_samples
        self.buffer_size = settings.buffer_size or settings.job_samples

    @classmethod
    def from_config(
        cls,
        config: Mapping[str, Any] | None,
        *,
        context: PipelineContext,
        record2sample: Record2Sample,
        environ: Mapping[str, str],
    ) -> Self:
        """Parse the job size (P-STG-10) and build the stage."""
        del context, record2sample, environ
        settings = SFTJobDataSettings.parse(config, plugin_class=cls)
        return cls(settings)
