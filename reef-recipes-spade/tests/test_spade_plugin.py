"""The spade plugin registers its recipe through its entry point."""

from __future__ import annotations

from reef import PluginKind, Plugins
from reef_spade.recipe import SpadeRecipe


def test_entry_point_registers_the_spade_recipe() -> None:
    """rule: P-STG-7 -- the recipe names a default class per stage in pipeline_spec()."""
    plugins = Plugins(blocked=())
    plugins.load()
    registration = plugins.registration(PluginKind.RECIPE, "spade")
    assert registration is not None
    assert (registration.cls, registration.distribution) == (SpadeRecipe, "reef-recipes-spade")
    assert SpadeRecipe.pipeline_spec().record2sample == "GeneratedTaskSamples"


def test_blocking_spade_leaves_its_recipe_out() -> None:
    plugins = Plugins(blocked={"spade"})
    plugins.load()
    assert "spade" not in plugins.names(PluginKind.RECIPE)
