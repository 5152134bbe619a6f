"""The ``spade`` plugin (entry point ``reef.plugins``): SPADE as the task generator ``spade``.

Registered as a ``module:Class`` reference: listing plugins and checking a deployment that
does not use it import nothing of the generator (its designer's HTTP client)."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl


@hookimpl
def reef_register_task_generators(registry: PluginRegistrar) -> None:
    registry.register("spade", "reef_spade.generator:SpadeGenerator")
