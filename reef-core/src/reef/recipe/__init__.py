"""Recipes: a training method names the default class of each stage of its pipeline.

A recipe is registered under a short name (``reef_register_recipes``) and named by a
deployment's ``scenarios.<name>.recipe``. The deployment's ``pipeline`` section gives each stage
its config and may name another class; without one, the recipe's :meth:`Recipe.pipeline_spec`
decides.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import Any, ClassVar, Generic

import attrs
from typing_extensions import TypeVar

from reef.core.deployment import PipelineSection
from reef.core.plugins import NoSettings, PluginSettings, RecipeConfigError


@attrs.frozen
class PipelineSpec:
    """The default class of each stage: a registered name or a ``module:Class`` reference."""

    record2sample: str
    sample2job: str


#: A recipe's settings class, what its class methods receive typed
#: (``class MyRecipe(Recipe[MyRecipeSettings])``).
RecipeSettingsT = TypeVar("RecipeSettingsT", bound=PluginSettings, default=PluginSettings)


class Recipe(abc.ABC, Generic[RecipeSettingsT]):
    """The base of every recipe.

    :cvar Settings: the recipe's own settings (``scenarios.<name>.recipe_config``); a recipe
        without any keeps :class:`reef.core.plugins.NoSettings`.
    :cvar requires_job_samples: a weight recipe has no default ``job_samples``: a deployment
        that does not set ``pipeline.sample2job.config.job_samples`` fails its build.
    :cvar job_parameters: what the trainer gives the training component with each job of this
        recipe (the objective, scheduling, ...), checked by the component's job parameters;
        empty: the component's defaults. :meth:`job_parameters_of` may add what a deployment
        sets.
    """

    Settings: ClassVar[type[PluginSettings]] = NoSettings
    requires_job_samples: ClassVar[bool] = False
    job_parameters: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    @abc.abstractmethod
    def pipeline_spec(cls) -> PipelineSpec:
        """Extension point: the default class of each stage, used where the deployment names
        none."""

    @classmethod
    def job_parameters_of(cls, settings: RecipeSettingsT) -> Mapping[str, Any]:
        """Extension point: the job parameters of a deployment whose recipe config parsed to
        ``settings`` (an instance of :attr:`Settings`, typed by the class's parameter:
        ``Recipe[MyRecipeSettings]``). The default: :attr:`job_parameters`.

        A recipe whose objective a deployment configures (a distilling recipe's teacher and
        coefficients) builds them here, so that the stages hold nothing numeric (P-STG-15).
        """
        del settings
        return cls.job_parameters

    @classmethod
    def check_pipeline(
        cls, pipeline: PipelineSection, settings: RecipeSettingsT, *, path: str
    ) -> None:
        """Extension point: refuse a pipeline section this recipe cannot build, or one its own
        config cannot train with (an objective that needs something a stage's config turns
        off), before any stage is built. It runs once the recipe's config has parsed.

        :param pipeline: the deployment's pipeline section: each stage's class (``None``: the
            recipe's default) and raw config.
        :param settings: the recipe's config, parsed (an instance of :attr:`Settings`).
        :param path: the path of the pipeline section in its document.
        :raises RecipeConfigError: naming the recipe, the key and the reason.
        """
        del settings
        if cls.requires_job_samples and "job_samples" not in (pipeline.sample2job.config or {}):
            raise RecipeConfigError(
                cls.__name__,
                f"{path}.sample2job.config.job_samples",
                "a weight recipe has no default job_samples: set it (usually to the training"
                " component's batch size, so one job is one optimizer step)",
            )
