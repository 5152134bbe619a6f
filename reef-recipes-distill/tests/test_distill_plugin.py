"""The distill plugin registers its recipe through its entry point."""

from __future__ import annotations

from reef import PluginKind, Plugins
from reef_distill.recipe import DistillRecipe


def test_entry_point_registers_the_distill_recipe_naming_core_stages() -> None:
    """rule: P-STG-7 -- the recipe names a default class per stage in pipeline_spec()."""
    plugins = Plugins(blocked=())
    plugins.load()
    assert plugins.resolve(PluginKind.RECIPE, "distill") is DistillRecipe
    registration = plugins.registration(PluginKind.RECIPE, "distill")
    assert registration is not None
    assert registration.distribution == "reef-recipes-distill"
    spec = DistillRecipe.pipeline_spec()
    assert (spec.record2sample, spec.sample2job) == ("DistillSamples", "DistillJobData")
    assert DistillRecipe.requires_job_samples
