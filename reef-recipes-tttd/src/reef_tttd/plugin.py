"""The ``tttd`` plugin (entry point ``reef.plugins``): the TTTD recipe and its stages."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl
from reef_tttd.grid import TTTDSamples
from reef_tttd.job_data import TTTDJobData
from reef_tttd.recipe import TTTDRecipe


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    registry.register("tttd", TTTDRecipe)


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    registry.register("TTTDSamples", TTTDSamples)


@hookimpl
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    registry.register("TTTDJobData", TTTDJobData)
