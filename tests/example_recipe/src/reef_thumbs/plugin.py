"""The ``thumbs`` plugin (entry point ``reef.plugins``): the recipe and its two stages.

Reef imports this module when it loads plugins, never at its own import; each hook registers
classes under the short names a deployment writes.
"""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl
from reef_thumbs.processor import ThumbsJobData, ThumbsSamples
from reef_thumbs.recipe import ThumbsRecipe


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    registry.register("thumbs", ThumbsRecipe)


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    registry.register("ThumbsSamples", ThumbsSamples)


@hookimpl
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    registry.register("ThumbsJobData", ThumbsJobData)
