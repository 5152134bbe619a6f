"""The generated-task recipe (P-TASK-1): train on the tasks of a
:class:`~reef.recipe.generated_tasks.contract.TaskGenerator`, with the stages of
:mod:`reef.recipe.generated_tasks.processor`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from reef.components.task_rollouts import RolloutParameters
from reef.core.config import config_option
from reef.core.plugins import PluginSettings
from reef.recipe import PipelineSpec, Recipe


@attrs.frozen
class GeneratedTaskJobParameters(PluginSettings):
    """``recipe.config.job_parameters``: what each task job tells the training component."""

    rollout: RolloutParameters = config_option(
        factory=RolloutParameters,
        help="how many rollouts of each task a job runs, with which agent and sandbox",
    )


@attrs.frozen
class GeneratedTaskRecipeSettings(PluginSettings):
    """The generated-task recipe's own keys (``scenarios.<name>.recipe.config``)."""

    job_parameters: GeneratedTaskJobParameters = config_option(
        factory=GeneratedTaskJobParameters, help="the task jobs' parameters: rollout"
    )


class GeneratedTaskRecipe(Recipe[GeneratedTaskRecipeSettings]):
    """Train on tasks a :class:`~reef.recipe.generated_tasks.contract.TaskGenerator` makes
    (P-TASK-1).

    Its stages are ``GeneratedTaskSamples`` (the generation rounds) and
    ``GeneratedTaskJobData`` (task jobs); each task job trains with the ``task_group``
    objective and the deployment's ``rollout`` parameters.
    """

    Settings: ClassVar[type[PluginSettings]] = GeneratedTaskRecipeSettings
    job_parameters: ClassVar[Mapping[str, Any]] = {"objective": "task_group"}

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """``GeneratedTaskSamples`` then ``GeneratedTaskJobData``."""
        return PipelineSpec(record2sample="GeneratedTaskSamples", sample2job="GeneratedTaskJobData")

    @classmethod
    def job_parameters_of(cls, settings: GeneratedTaskRecipeSettings) -> Mapping[str, Any]:
        """The ``task_group`` objective and the deployment's ``rollout`` (P-TASK-13)."""
        rollout = attrs.asdict(settings.job_parameters.rollout)
        return {**cls.job_parameters, "rollout": rollout}
