"""The ``distill`` plugin (entry point ``reef.plugins``)."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl
from reef_distill.recipe import DistillRecipe


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    registry.register("distill", DistillRecipe)
