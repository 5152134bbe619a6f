"""The ``sft`` plugin (entry point ``reef.plugins``): the recipe and its stages, registered as
``module:Class`` references, each imported when a deployment first uses it."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    registry.register("sft", "reef_sft.recipe:SFTRecipe")


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    registry.register("SFTSamples", "reef_sft.processor:SFTSamples")


@hookimpl
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    registry.register("SFTJobData", "reef_sft.processor:SFTJobData")
