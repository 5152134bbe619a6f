"""The ``openclaw-rl`` recipe: OpenClaw-RL's two objectives over judged agent turns.

The stages (:mod:`reef_distill.openclaw.processor`) judge each turn from its next state; the
recipe's config chooses the objective the training component trains, as OpenClaw-RL publishes
them (its ``openclaw-rl`` and ``openclaw-opd`` methods):

- ``binary``: the majority vote ``r`` (+1 or -1) is every reply token's advantage, not
  normalised, trained with the clipped importance-sampling loss (PPO's, ``clip_low`` 0.2 and
  ``clip_high`` 0.28);
- ``hindsight``: on-policy distillation with the best hint as the teacher's context: each reply
  token's advantage is ``log p_teacher(y_t | s + hint) - log p_student(y_t | s)``, with the same
  clipped loss. Its judging must ask for hints (``hints: true`` in the record-to-sample config).
"""

from __future__ import annotations

import pkgutil
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from reef import (
    DistillationParameters,
    PipelineSection,
    PipelineSpec,
    PluginSettings,
    Recipe,
    RecipeConfigError,
    TeacherSettings,
    config_option,
)

_OBJECTIVES = ("binary", "hindsight")


@attrs.frozen
class OpenClawRLRecipeSettings(PluginSettings):
    """The ``openclaw-rl`` recipe's config: which of the method's objectives trains."""

    objective: str = config_option(
        "binary",
        help="binary (the judged reward) or hindsight (distil the hinted teacher)",
        validator=attrs.validators.in_(_OBJECTIVES),
    )
    teacher: TeacherSettings = config_option(
        factory=TeacherSettings,
        help="hindsight: the model that reads the hint (default: the student at the job's start "
        "weights; OpenClaw-RL asks its judge model)",
    )
    clip_low: float = config_option(
        0.2, help="the ratio is clipped below at 1 - clip_low", validator=attrs.validators.ge(0)
    )
    clip_high: float = config_option(
        0.28, help="the ratio is clipped above at 1 + clip_high", validator=attrs.validators.ge(0)
    )


class OpenClawRLRecipe(Recipe[OpenClawRLRecipeSettings]):
    """OpenClaw-RL (see the module's documentation); a weight recipe."""

    Settings: ClassVar[type[PluginSettings]] = OpenClawRLRecipeSettings
    requires_job_samples: ClassVar[bool] = True
    job_parameters: ClassVar[Mapping[str, Any]] = {"objective": "ppo", "reward_baseline": "none"}

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """``OpenClawRLSamples`` then ``OpenClawRLJobData``."""
        return PipelineSpec(record2sample="OpenClawRLSamples", sample2job="OpenClawRLJobData")

    @classmethod
    def check_pipeline(
        cls, pipeline: PipelineSection, settings: OpenClawRLRecipeSettings, *, path: str
    ) -> None:
        """Also refuse an objective its record-to-sample stage, the recipe's
        ``OpenClawRLSamples``, does not judge for: hindsight without hints (its turns would
        carry no teacher, so nothing would train), and binary with hints (a hinting judge's +1
        says the next state holds a hint, not that the turn was good, so the reward would train
        the wrong signal)."""
        super().check_pipeline(pipeline, settings, path=path)
        stage = pipeline.record2sample
        ours = _names_openclaw_samples(stage.class_)
        hinted = (stage.config or {}).get("hints") is True
        if settings.objective == "hindsight" and ours and not hinted:
            raise RecipeConfigError(
                cls.__name__,
                f"{path}.record2sample.config.hints",
                "the hindsight objective distils the judge's hints, and OpenClawRLSamples asks"
                " for none: set hints: true in pipeline.record2sample.config (or use objective:"
                " binary)",
            )
        if settings.objective == "binary" and ours and hinted:
            raise RecipeConfigError(
                cls.__name__,
                f"{path}.record2sample.config.hints",
                "the binary objective trains the judge's good/bad votes, and with hints: true"
                " OpenClawRLSamples asks the judge for hints instead: remove hints (or use"
                " objective: hindsight)",
            )

    @classmethod
    def job_parameters_of(cls, settings: OpenClawRLRecipeSettings) -> Mapping[str, Any]:
        """The clipped loss with the binary reward, or with the hinted teacher's advantage."""
        parameters: dict[str, Any] = {
            **cls.job_parameters,
            "clip_low": settings.clip_low,
            "clip_high": settings.clip_high,
        }
        if settings.objective == "hindsight":
            distillation = DistillationParameters(teacher=settings.teacher, kl_coef=1.0)
            parameters["distillation"] = attrs.asdict(distillation)
        return parameters


def _names_openclaw_samples(class_name: str | None) -> bool:
    """Whether a deployment's record-to-sample class is ``OpenClawRLSamples``: unset (the
    recipe's default), its registered name, or a ``module:Class`` reference to it."""
    if class_name is None or class_name == OpenClawRLRecipe.pipeline_spec().record2sample:
        return True
    if ":" not in class_name:
        return False
    # Imported only to compare a reference: the recipe class alone (``reef plugins`` reads its
    # pipeline) does not load the stages and their judge's HTTP client.
    from reef_distill.openclaw.processor import OpenClawRLSamples

    try:
        return pkgutil.resolve_name(class_name) is OpenClawRLSamples
    except (ImportError, AttributeError, ValueError):
        return False  # a class that does not resolve is refused where the deployment names it
