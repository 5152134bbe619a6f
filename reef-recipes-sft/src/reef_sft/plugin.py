"""The ``sft`` plugin (entry point ``reef.plugins``): the recipe and its stages."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl
from reef_sft.processor import SFTJobData, SFTSamples
from reef_sft.recipe import SFTRecipe


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    registry.register("sft", SFTRecipe)


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    registry.register("SFTSamples", SFTSamples)


@hookimpl
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    registry.register("SFTJobData", SFTJobData)
