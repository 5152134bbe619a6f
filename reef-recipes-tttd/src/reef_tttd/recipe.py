"""The recipes: ``tttd`` (TTT-Discover) and ``sdpo`` (self-distillation with feedback), both on
a runner's step grid."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from reef import (
    DistillationParameters,
    FullLogitDistillation,
    PipelineSpec,
    PluginSettings,
    Recipe,
    TeacherSettings,
    config_option,
)


@attrs.frozen
class TTTDRecipeSettings(PluginSettings):
    """The ``tttd`` recipe's config: TTT-Discover's optional KL penalty against the base model
    (``kl_penalty_coef``, 0 by default as in the published code)."""

    kl_penalty_coef: float = config_option(
        0.0,
        help="the KL penalty's weight: each token's advantage gains kl_penalty_coef * (the "
        "job's mean of log p - log p_base, minus the token's); 0: no penalty",
        validator=attrs.validators.ge(0),
    )
    base_model: str | None = config_option(
        None, help="kl_penalty_coef > 0: the base model's folder, what the penalty measures from"
    )
    kl_discount_factor: float = config_option(
        0.0,
        help="the KL penalty's discount over the later tokens (the published kl_discount_factor)",
        validator=[attrs.validators.ge(0), attrs.validators.le(1)],
    )

    def __attrs_post_init__(self) -> None:
        if self.kl_penalty_coef > 0 and self.base_model is None:
            raise ValueError("kl_penalty_coef measures the KL from base_model: set it")


class TTTDRecipe(Recipe[TTTDRecipeSettings]):
    """TTT-Discover: an external runner reports each step's rollouts in a grid; each complete
    step trains as one job with entropic advantages and the importance-sampling loss.

    Its ``job_samples`` defaults to one step of the grid, so it is not required.
    """

    Settings: ClassVar[type[PluginSettings]] = TTTDRecipeSettings
    job_parameters: ClassVar[Mapping[str, Any]] = {"objective": "importance_sampling"}

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """``TTTDSamples`` then ``TTTDJobData``."""
        return PipelineSpec(record2sample="TTTDSamples", sample2job="TTTDJobData")

    @classmethod
    def job_parameters_of(cls, settings: TTTDRecipeSettings) -> Mapping[str, Any]:
        """With a KL penalty: the base model as a teacher of the rollouts' own tokens, its KL
        term centred on the job's mean, beside the entropic advantage (``reward_coef`` 1)."""
        if settings.kl_penalty_coef == 0:
            return cls.job_parameters
        distillation = DistillationParameters(
            teacher=TeacherSettings(model_path=settings.base_model),
            kl_coef=settings.kl_penalty_coef,
            reward_coef=1.0,
            kl_discount_factor=settings.kl_discount_factor,
            kl_centred=True,
        )
        return {"objective": "importance_sampling", "distillation": attrs.asdict(distillation)}


def _fraction(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 <= value <= 1:
        raise ValueError(f"{attribute.name} must be in [0, 1], got {value!r}")


@attrs.frozen
class SDPORecipeSettings(PluginSettings):
    """The ``sdpo`` recipe's config (``scenarios.<name>.recipe.config``): its objective."""

    distillation_weight: float = config_option(
        1.0,
        help="w in w * (reverse KL to the teacher) + (1 - w) * (policy gradient); 1: the"
        " self-distillation alone, 0: GRPO",
        validator=_fraction,
    )
    teacher_update_rate: float | None = config_option(
        None,
        help="the teacher: unset, the student at each job's start weights; a rate, the"
        " student's moving average moved this far toward it after each job (the authors'"
        " default 0.05; 0: the frozen initial weights)",
        validator=attrs.validators.optional(_fraction),
    )
    is_clip: float | None = config_option(
        None,
        help="the importance ratio truncated at this value (the authors' is_clip: 2); unset:"
        " the ratio as it is",
        validator=attrs.validators.optional(attrs.validators.gt(0)),
    )
    full_logit: FullLogitDistillation | None = config_option(
        None,
        help="distil the teacher's distribution over the student's top-k tokens with a tail"
        " bucket and a Jensen-Shannon mix (topk, add_tail, alpha: the authors' default form,"
        " {} for their 100, true, 0.5; the local component only); unset: the sampled token's"
        " reverse KL (TRL's default, every component)",
    )


class SDPORecipe(Recipe[SDPORecipeSettings]):
    """SDPO: the policy, given its rollout's feedback or a successful sibling, is its own
    teacher; the per-token reverse KL to it, mixed with the group-relative policy gradient,
    trains each step of the grid as one job (the importance-sampling loss)."""

    Settings: ClassVar[type[PluginSettings]] = SDPORecipeSettings
    job_parameters: ClassVar[Mapping[str, Any]] = {
        "objective": "importance_sampling",
        "distillation": {"kl_coef": 1.0, "reward_coef": 0.0},
    }

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """``SDPOSamples`` then ``SDPOJobData``."""
        return PipelineSpec(record2sample="SDPOSamples", sample2job="SDPOJobData")

    @classmethod
    def job_parameters_of(cls, settings: SDPORecipeSettings) -> Mapping[str, Any]:
        """The self-teacher (no model: the student at the job's start weights, or its moving
        average with ``teacher_update_rate``) and the mix."""
        weight = settings.distillation_weight
        distillation = DistillationParameters(
            teacher=TeacherSettings(update_rate=settings.teacher_update_rate),
            kl_coef=weight,
            reward_coef=1.0 - weight,
            full_logit=settings.full_logit,
        )
        parameters: dict[str, Any] = {
            "objective": "importance_sampling",
            "distillation": attrs.asdict(distillation),
        }
        if settings.is_clip is not None:
            parameters["is_clip"] = settings.is_clip
        return parameters
