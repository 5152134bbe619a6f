"""The recipes: ``tttd`` (TTT-Discover) and ``sdpo`` (self-distillation with feedback), both on
a runner's step grid."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from reef import (
    DistillationParameters,
    PipelineSpec,
    PluginSettings,
    Recipe,
    TeacherSettings,
    config_option,
)


class TTTDRecipe(Recipe):
    """TTT-Discover: an external runner reports each step's rollouts in a grid; each complete
    step trains as one job with entropic advantages and the importance-sampling loss.

    Its ``job_samples`` defaults to one step of the grid, so it is not required.
    """

    job_parameters: ClassVar[Mapping[str, Any]] = {"objective": "importance_sampling"}

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """``TTTDSamples`` then ``TTTDJobData``."""
        return PipelineSpec(record2sample="TTTDSamples", sample2job="TTTDJobData")


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
        """The self-teacher (no model: the student at the job's start weights) and the mix."""
        weight = settings.distillation_weight
        distillation = DistillationParameters(
            teacher=TeacherSettings(), kl_coef=weight, reward_coef=1.0 - weight
        )
        return {"objective": "importance_sampling", "distillation": attrs.asdict(distillation)}
