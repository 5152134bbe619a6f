"""The ``distill`` plugin (entry point ``reef.plugins``): on-policy distillation (whose stages
are the core's ``DistillSamples`` and ``DistillJobData``) and OpenClaw-RL."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    # Imported when the hook runs: listing plugins loads this module, not the stages.
    from reef_distill.openclaw.recipe import OpenClawRLRecipe
    from reef_distill.recipe import DistillRecipe

    registry.register("distill", DistillRecipe)
    registry.register("openclaw-rl", OpenClawRLRecipe)


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    from reef_distill.openclaw.processor import OpenClawRLSamples

    registry.register("OpenClawRLSamples", OpenClawRLSamples)


@hookimpl
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    from reef_distill.openclaw.processor import OpenClawRLJobData

    registry.register("OpenClawRLJobData", OpenClawRLJobData)
