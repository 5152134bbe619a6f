"""The ``tttd`` plugin (entry point ``reef.plugins``): the TTTD and SDPO recipes and their
stages."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl
from reef_tttd.processor import SDPOJobData, SDPOSamples, TTTDJobData, TTTDSamples
from reef_tttd.recipe import SDPORecipe, TTTDRecipe


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    registry.register("tttd", TTTDRecipe)
    registry.register("sdpo", SDPORecipe)


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    registry.register("TTTDSamples", TTTDSamples)
    registry.register("SDPOSamples", SDPOSamples)


@hookimpl
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    registry.register("TTTDJobData", TTTDJobData)
    registry.register("SDPOJobData", SDPOJobData)
