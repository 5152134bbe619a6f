"""The ``spade`` plugin (entry point ``reef.plugins``)."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl
from reef_spade.recipe import SpadeRecipe


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    registry.register("spade", SpadeRecipe)
