"""The ``distill`` plugin (entry point ``reef.plugins``): on-policy distillation (whose stages
are the core's ``DistillSamples`` and ``DistillJobData``) and OpenClaw-RL.

Each class is registered as a ``module:Class`` reference and imported when a deployment first
uses it: listing plugins loads this module, not the stages (nor the judge's HTTP client)."""

from __future__ import annotations

from reef import PluginRegistrar, hookimpl


@hookimpl
def reef_register_recipes(registry: PluginRegistrar) -> None:
    registry.register("distill", "reef_distill.recipe:DistillRecipe")
    registry.register("openclaw-rl", "reef_distill.openclaw.recipe:OpenClawRLRecipe")


@hookimpl
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    registry.register("OpenClawRLSamples", "reef_distill.openclaw.processor:OpenClawRLSamples")


@hookimpl
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    registry.register("OpenClawRLJobData", "reef_distill.openclaw.processor:OpenClawRLJobData")
