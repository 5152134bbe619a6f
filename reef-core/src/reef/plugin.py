"""reef-core's own plugin: the built-in recipe, stages and component, registered through the
same entry point group (``reef.plugins``, as ``core``) as any distribution's, so ``reef plugins``
lists them alike."""

from __future__ import annotations

import logging

from reef.core.plugins import PluginRegistrar
from reef.hookspecs import hookimpl


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    """The core's record-to-sample stages."""
    # Imported when the hook runs, not when the entry point loads: the stages pull in the
    # pipeline's modules, which listing plugins does not need until it registers them.
    from reef.record2sample.no_samples import NoSamples
    from reef.record2sample.reports import ReportSamples
    from reef.record2sample.trajectories import TrajectorySamples
    from reef.sample2job.grouped import GroupedReportSamples

    registry.register("NoSamples", NoSamples)
    registry.register("TrajectorySamples", TrajectorySamples)
    registry.register("ReportSamples", ReportSamples)
    registry.register("GroupedReportSamples", GroupedReportSamples)


@hookimpl
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    """The core's sample-to-job stages."""
    from reef.sample2job.grouped import GroupedJobData

    registry.register("GroupedJobData", GroupedJobData)


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    """The core's default weight recipe."""
    from reef.recipe.grouped import GroupedRecipe

    registry.register("grouped", GroupedRecipe)


@hookimpl
def reef_register_components(registry: PluginRegistrar) -> None:
    """The local training component, when its extra (torch) is installed."""
    try:
        from reef.components.local import LocalComponent
    except ModuleNotFoundError as exc:
        # Without torch the core still runs everything else (the `torch` extra adds it).
        logging.getLogger(__name__).info("the local component needs %s: not registered", exc.name)
        return
    registry.register("local", LocalComponent)
