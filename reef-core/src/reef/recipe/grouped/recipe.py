"""The core's default weight recipe, ``grouped``: reported feedback in comparison groups,
trained GRPO-style.

Clients post reports naming their comparison group in ``metadata.group``; a group trains once it
holds ``group_size`` reports (:class:`~reef.recipe.grouped.processor.GroupedReportSamples`), and
each job's data keeps every sample's group
(:class:`~reef.recipe.grouped.processor.GroupedJobData`), so the component centres each reward
on its group's mean. A weight recipe: the deployment sets
``pipeline.sample2job.config.job_samples``.

GRPO's options, each where it belongs: the loss (``objective``, the clip range, the loss
aggregation) is this recipe's config (:class:`GroupedRecipeSettings`, given to the component as
job parameters); the advantage (standard-deviation scaling) is the sample-to-job stage's
``advantage``; DAPO's dynamic sampling is the record-to-sample stage's ``dynamic_sampling``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from reef.components.job_parameters import LOSS_AGGREGATIONS
from reef.core.config import config_option
from reef.core.plugins import PluginSettings
from reef.recipe import PipelineSpec, Recipe


def _ratio_clip(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value >= 0:
        raise ValueError(f"{attribute.name} must be 0 or more, got {value!r}")


@attrs.frozen
class GroupedRecipeSettings(PluginSettings):
    """The ``grouped`` recipe's config (``scenarios.<name>.recipe.config``): its loss."""

    objective: str = config_option(
        "importance_sampling",
        help="importance_sampling (the ratio unclipped) or ppo (GRPO's clipped ratio)",
        validator=attrs.validators.in_(("importance_sampling", "ppo")),
    )
    clip_low: float = config_option(
        0.2, help="ppo: the ratio is clipped below at 1 - clip_low (TRL's epsilon)",
        validator=_ratio_clip,
    )  # fmt: skip
    clip_high: float = config_option(
        0.2,
        help="ppo: the ratio is clipped above at 1 + clip_high (TRL's epsilon_high; DAPO 0.28)",
        validator=_ratio_clip,
    )
    loss_aggregation: str = config_option(
        "token_mean",
        help="token_mean, sequence_mean, sample_mean or token_sum_norm (Dr. GRPO, with "
        "loss_norm_tokens)",
        validator=attrs.validators.in_(LOSS_AGGREGATIONS),
    )
    loss_norm_tokens: int | None = config_option(
        None,
        help="token_sum_norm: the constant a sequence's token sum is divided by",
        validator=attrs.validators.optional(attrs.validators.gt(0)),
    )

    def __attrs_post_init__(self) -> None:
        if (self.loss_aggregation == "token_sum_norm") != (self.loss_norm_tokens is not None):
            raise ValueError(
                "loss_aggregation token_sum_norm divides by loss_norm_tokens: set both, or neither"
            )


class GroupedRecipe(Recipe[GroupedRecipeSettings]):
    """Grouped reported feedback (see the module's documentation).

    :cvar job_parameters: what the trainer gives the component with each job by default: the
        importance-sampling policy gradient, whose advantages are group-centred rewards.
    """

    Settings: ClassVar[type[PluginSettings]] = GroupedRecipeSettings
    requires_job_samples: ClassVar[bool] = True
    job_parameters: ClassVar[Mapping[str, Any]] = {"objective": "importance_sampling"}

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """``GroupedReportSamples`` then ``GroupedJobData``."""
        return PipelineSpec(record2sample="GroupedReportSamples", sample2job="GroupedJobData")

    @classmethod
    def job_parameters_of(cls, settings: GroupedRecipeSettings) -> Mapping[str, Any]:
        """The loss the config names; the defaults give :attr:`job_parameters`."""
        if settings == GroupedRecipeSettings():
            return cls.job_parameters
        parameters: dict[str, Any] = {
            "objective": settings.objective,
            "loss_aggregation": settings.loss_aggregation,
            "loss_norm_tokens": settings.loss_norm_tokens,
        }
        if settings.objective == "ppo":
            parameters |= {"clip_low": settings.clip_low, "clip_high": settings.clip_high}
        return parameters
