"""The ``spade`` plugin (entry point ``reef.plugins``): SPADE as the task generator ``spade``."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl
from reef_spade.generator import SpadeGenerator


@hookimpl
def reef_register_task_generators(registry: PluginRegistrar) -> None:
    registry.register("spade", SpadeGenerator)
