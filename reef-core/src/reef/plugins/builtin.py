"""reef-core's own plugin: the built-in recipes, stages and components, registered through the
same entry point group (``reef.plugins``, as ``core``) as any distribution's, so ``reef plugins``
lists them alike.

Every class is registered as a ``module:Class`` reference and imported when a deployment first
uses it: loading the plugins imports no stage, no PyTorch and no SDK. A built-in component is
or tracker is registered only when the packages of its extra are installed, which is found out
without importing them (:func:`built_in_components`, :func:`built_in_trackers`).
"""

from __future__ import annotations

import importlib.util
import logging
from typing import Final

import attrs

from reef.hookspecs import hookimpl
from reef.plugins.registrar import PluginRegistrar

#: The core's record-to-sample stages: name, reference.
RECORD2SAMPLE: Final = (
    ("NoSamples", "reef.record2sample.no_samples:NoSamples"),
    ("TrajectorySamples", "reef.record2sample.trajectories:TrajectorySamples"),
    ("ReportSamples", "reef.record2sample.reports:ReportSamples"),
    ("GroupedReportSamples", "reef.recipe.grouped.processor:GroupedReportSamples"),
    ("DistillSamples", "reef.record2sample.distill:DistillSamples"),
    ("GeneratedTaskSamples", "reef.recipe.generated_tasks.processor:GeneratedTaskSamples"),
    ("TraceSamples", "reef.record2sample.traces:TraceSamples"),
)
#: The core's sample-to-job stages.
SAMPLE2JOB: Final = (
    ("GroupedJobData", "reef.recipe.grouped.processor:GroupedJobData"),
    ("DistillJobData", "reef.sample2job.distill:DistillJobData"),
    ("GeneratedTaskJobData", "reef.recipe.generated_tasks.processor:GeneratedTaskJobData"),
    ("TraceJobData", "reef.sample2job.traces:TraceJobData"),
    ("TrainTaskJobData", "reef.sample2job.traces:TrainTaskJobData"),
)
#: The core's recipes: the default weight recipe, generated tasks, harness evolution.
RECIPES: Final = (
    ("grouped", "reef.recipe.grouped.recipe:GroupedRecipe"),
    ("generated_tasks", "reef.recipe.generated_tasks.recipe:GeneratedTaskRecipe"),
    ("harness", "reef.recipe.harness:HarnessRecipe"),
)


@attrs.frozen
class BuiltInPlugin:
    """A built-in component or tracker: where it and its settings live, the extra that installs
    what it needs, and the top-level modules of that extra that it imports."""

    name: str
    reference: str
    settings: str
    extra: str
    needs: tuple[str, ...]


#: Each built-in component.
BUILT_IN_COMPONENTS: Final = (
    BuiltInPlugin(
        "local",
        "reef.components.local.component:LocalComponent",
        "reef.components.local.settings:LocalComponentSettings",
        "torch",
        ("torch", "jinja2"),
    ),
    BuiltInPlugin(
        "tinker",
        "reef.components.tinker.component:TinkerComponent",
        "reef.components.tinker.settings:TinkerComponentSettings",
        "tinker",
        ("tinker", "jinja2"),
    ),
    BuiltInPlugin(
        "slime",
        "reef.components.slime.component:SlimeComponent",
        "reef.components.slime.component:SlimeComponentSettings",
        "slime",
        ("jinja2", "transformers"),
    ),
)


#: Each built-in experiment tracker (:mod:`reef.trackers`).
BUILT_IN_TRACKERS: Final = (
    BuiltInPlugin(
        "tensorboard",
        "reef.trackers.tensorboard:TensorBoardTracker",
        "reef.trackers.tensorboard:TensorBoardSettings",
        "tensorboard",
        ("tensorboard", "numpy"),
    ),
    BuiltInPlugin(
        "mlflow",
        "reef.trackers.mlflow:MlflowTracker",
        "reef.trackers.mlflow:MlflowSettings",
        "mlflow",
        ("mlflow",),
    ),
    BuiltInPlugin(
        "wandb",
        "reef.trackers.wandb:WandbTracker",
        "reef.trackers.wandb:WandbSettings",
        "wandb",
        ("wandb",),
    ),
)


@attrs.frozen
class UnavailablePlugin:
    """A built-in component or tracker whose extra is not installed: what is missing, how to
    install it."""

    name: str
    missing: str
    install: str


def built_in_components() -> tuple[list[BuiltInPlugin], list[UnavailablePlugin]]:
    """The built-in components whose extras are installed here, and those whose are not (each
    with the first module it misses). Nothing is imported: a module's presence is enough."""
    return _installed(BUILT_IN_COMPONENTS)


def built_in_trackers() -> tuple[list[BuiltInPlugin], list[UnavailablePlugin]]:
    """The built-in trackers whose extras are installed here, and those whose are not."""
    return _installed(BUILT_IN_TRACKERS)


def _installed(
    plugins: tuple[BuiltInPlugin, ...],
) -> tuple[list[BuiltInPlugin], list[UnavailablePlugin]]:
    available: list[BuiltInPlugin] = []
    unavailable: list[UnavailablePlugin] = []
    for component in plugins:
        missing = [m for m in component.needs if importlib.util.find_spec(m) is None]
        if missing:
            install = f"pip install 'reef-core[{component.extra}]'"
            unavailable.append(UnavailablePlugin(component.name, missing[0], install))
        else:
            available.append(component)
    return available, unavailable


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    """The core's record-to-sample stages."""
    for name, reference in RECORD2SAMPLE:
        registry.register(name, reference)


@hookimpl
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    """The core's sample-to-job stages."""
    for name, reference in SAMPLE2JOB:
        registry.register(name, reference)


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    """The core's recipes."""
    for name, reference in RECIPES:
        registry.register(name, reference)


@hookimpl
def reef_register_components(registry: PluginRegistrar) -> None:
    """The built-in training components whose extras are installed."""
    available, unavailable = built_in_components()
    for component in available:
        registry.register(component.name, component.reference, settings=component.settings)
    for missing in unavailable:
        logging.getLogger(__name__).info(
            "the %s component needs %s (%s): not registered",
            missing.name,
            missing.missing,
            missing.install,
        )


@hookimpl
def reef_register_trackers(registry: PluginRegistrar) -> None:
    """The built-in experiment trackers whose extras are installed."""
    for tracker in built_in_trackers()[0]:
        registry.register(tracker.name, tracker.reference, settings=tracker.settings)
