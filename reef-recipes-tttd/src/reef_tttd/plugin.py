"""The ``tttd`` plugin (entry point ``reef.plugins``): the TTTD and SDPO recipes and their
stages, registered as ``module:Class`` references, each imported when a deployment first uses
it."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    registry.register("tttd", "reef_tttd.recipe:TTTDRecipe")
    registry.register("sdpo", "reef_tttd.recipe:SDPORecipe")


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    registry.register("TTTDSamples", "reef_tttd.processor:TTTDSamples")
    registry.register("SDPOSamples", "reef_tttd.processor:SDPOSamples")


@hookimpl
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    registry.register("TTTDJobData", "reef_tttd.processor:TTTDJobData")
    registry.register("SDPOJobData", "reef_tttd.processor:SDPOJobData")
