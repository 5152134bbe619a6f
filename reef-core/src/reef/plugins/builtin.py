"""reef-core's own plugin: the built-in recipe, stages and component, registered through the
same entry point group (``reef.plugins``, as ``core``) as any distribution's, so ``reef plugins``
lists them alike."""

from __future__ import annotations

import importlib
import logging
from typing import Any

import attrs

from reef.hookspecs import hookimpl
from reef.plugins.registrar import PluginRegistrar


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    """The core's record-to-sample stages."""
    # Imported when the hook runs, not when the entry point loads: the stages pull in the
    # pipeline's modules, which listing plugins does not need until it registers them.
    from reef.record2sample.distill import DistillSamples
    from reef.record2sample.generated_tasks import GeneratedTaskSamples
    from reef.record2sample.grouped import GroupedReportSamples
    from reef.record2sample.no_samples import NoSamples
    from reef.record2sample.reports import ReportSamples
    from reef.record2sample.traces import TraceSamples
    from reef.record2sample.trajectories import TrajectorySamples

    registry.register("NoSamples", NoSamples)
    registry.register("TrajectorySamples", TrajectorySamples)
    registry.register("ReportSamples", ReportSamples)
    registry.register("GroupedReportSamples", GroupedReportSamples)
    registry.register("DistillSamples", DistillSamples)
    registry.register("GeneratedTaskSamples", GeneratedTaskSamples)
    registry.register("TraceSamples", TraceSamples)


@hookimpl
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    """The core's sample-to-job stages."""
    from reef.sample2job.distill import DistillJobData
    from reef.sample2job.generated_tasks import GeneratedTaskJobData
    from reef.sample2job.grouped import GroupedJobData
    from reef.sample2job.traces import TraceJobData, TrainTaskJobData

    registry.register("GroupedJobData", GroupedJobData)
    registry.register("DistillJobData", DistillJobData)
    registry.register("GeneratedTaskJobData", GeneratedTaskJobData)
    registry.register("TraceJobData", TraceJobData)
    registry.register("TrainTaskJobData", TrainTaskJobData)


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    """The core's default weight recipe, and the generated-task recipe."""
    from reef.recipe.generated_tasks import GeneratedTaskRecipe
    from reef.recipe.grouped import GroupedRecipe
    from reef.recipe.harness import HarnessRecipe

    registry.register("grouped", GroupedRecipe)
    registry.register("generated_tasks", GeneratedTaskRecipe)
    registry.register("harness", HarnessRecipe)


#: Each built-in component: its name, where it lives, and the extra that installs what it needs.
BUILT_IN_COMPONENTS = (
    ("local", "reef.components.local:LocalComponent", "torch"),
    ("tinker", "reef.components.tinker:TinkerComponent", "tinker"),
    ("slime", "reef.components.slime:SlimeComponent", "slime"),
)


@attrs.frozen
class UnavailableComponent:
    """A built-in component whose extra is not installed: what is missing, how to install it."""

    name: str
    missing: str
    install: str


def built_in_components() -> tuple[dict[str, type[Any]], list[UnavailableComponent]]:
    """The built-in components that import here, by name, and those that do not."""
    available: dict[str, type[Any]] = {}
    unavailable: list[UnavailableComponent] = []
    for name, reference, extra in BUILT_IN_COMPONENTS:
        module, _, class_name = reference.partition(":")
        try:
            available[name] = getattr(importlib.import_module(module), class_name)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.split(".")[0] == "reef":
                raise  # a module of Reef itself: a broken installation, not a missing extra
            # Without its extra the core still runs everything else.
            missing = exc.name
            unavailable.append(
                UnavailableComponent(name, missing, f"pip install 'reef-core[{extra}]'")
            )
    return available, unavailable


@hookimpl
def reef_register_components(registry: PluginRegistrar) -> None:
    """The built-in training components whose extras are installed."""
    available, unavailable = built_in_components()
    for name, component in available.items():
        registry.register(name, component)
    for missing in unavailable:
        logging.getLogger(__name__).info(
            "the %s component needs %s (%s): not registered",
            missing.name,
            missing.missing,
            missing.install,
        )
