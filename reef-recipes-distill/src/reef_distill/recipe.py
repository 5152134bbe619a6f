"""The ``distill`` recipe: on-policy distillation with the core's shared distilling stages.

The student answers the agents; each report names a call to learn from, and may give the
teacher context the student did not have (``metadata.teacher_context``) or a whole teacher
request (``metadata.teacher_request``). ``DistillSamples`` makes the student's call a sample
with its teacher request, ``DistillJobData`` makes the job data, and the training component
trains the per-token reverse KL to the teacher as the advantage of an importance-sampling
update (tinker-cookbook's on-policy distillation), with the report's score beside it when
``reward_coef`` is set. The recipe's config is that objective: the teacher and the weights.
"""

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

#: The policy losses a distilling objective trains with.
_LOSSES = ("importance_sampling", "ppo")


@attrs.frozen
class DistillRecipeSettings(PluginSettings):
    """The ``distill`` recipe's config (``scenarios.<name>.recipe.config``): its objective."""

    teacher: TeacherSettings = config_option(
        factory=TeacherSettings,
        help="the teacher: model_path (a local model folder), base_url (with model and "
        "api_key: an engine answering prompt_logprobs), or neither (the student itself)",
    )
    kl_coef: float = config_option(
        1.0, help="weight of the per-token reverse KL", validator=attrs.validators.ge(0)
    )
    reward_coef: float = config_option(
        0.0,
        help="weight of the reports' scores beside the teacher (0: reports need no score)",
        validator=attrs.validators.ge(0),
    )
    kl_discount_factor: float = config_option(
        0.0,
        help="tinker-cookbook's kl_discount_factor: each token's KL advantage is the discounted"
        " sum of its own and the later tokens' (0: its own alone)",
        validator=[attrs.validators.ge(0), attrs.validators.le(1)],
    )
    loss: str = config_option(
        "importance_sampling",
        help="importance_sampling (tinker-cookbook's form) or ppo (clipped)",
        validator=attrs.validators.in_(_LOSSES),
    )


class DistillRecipe(Recipe[DistillRecipeSettings]):
    """On-policy distillation (see the module's documentation); a weight recipe."""

    Settings: ClassVar[type[PluginSettings]] = DistillRecipeSettings
    requires_job_samples: ClassVar[bool] = True

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """The core's ``DistillSamples`` then ``DistillJobData``."""
        return PipelineSpec(record2sample="DistillSamples", sample2job="DistillJobData")

    @classmethod
    def job_parameters_of(cls, settings: DistillRecipeSettings) -> Mapping[str, Any]:
        """The distilling objective of the recipe's config."""
        distillation = DistillationParameters(
            teacher=settings.teacher,
            kl_coef=settings.kl_coef,
            reward_coef=settings.reward_coef,
            kl_discount_factor=settings.kl_discount_factor,
        )
        return {"objective": settings.loss, "distillation": attrs.asdict(distillation)}
