"""Building a scenario's two stages from the deployment, the one way every caller does it.

The trainer builds them to compose its :class:`~reef.train.pipeline.TrainingPipeline`; the HTTP
service builds them too, to run admission the way the pipeline will read (``uploaded_sample``
of each trainer that accepts uploads, the training modes a stage supports). Both go through
:func:`build_stages`, so a stage is configured once and admission can never disagree with the
trainer about which class or config a scenario uses.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from reef.core.deployment import ScenarioSection, scenario_classes
from reef.core.plugins import Plugins
from reef.pipeline_context import PipelineContext
from reef.record2sample.stage import Record2Sample
from reef.sample2job.stage import Sample2Job

__all__ = ["build_stages", "scenario_trainers"]


def scenario_trainers(scenario: ScenarioSection) -> tuple[str, ...]:
    """The trainers of a scenario, by name: one per training component, named by the
    component as the deployment names it (``training.component``); none without a
    ``training`` section (the scenario records and admits, but nothing trains)."""
    return () if scenario.training is None else (scenario.training.component,)


def build_stages(
    name: str,
    scenario: ScenarioSection,
    *,
    plugins: Plugins,
    context: PipelineContext,
    environ: Mapping[str, str] | None = None,
) -> tuple[Record2Sample, Sample2Job]:
    """The record-to-sample and sample-to-job stages of scenario ``name``, built with
    ``from_config`` in pipeline order (the sample-to-job stage receives the other, P-STG-8).

    :raises reef.core.deployment.DeploymentError: when a class cannot be resolved or a config
        does not parse.
    :raises reef.core.plugins.PluginConfigError: when a stage refuses its config at build time.
    """
    classes = scenario_classes(name, scenario, plugins)
    assert classes is not None  # scenario_classes raises instead of returning None here
    env = os.environ if environ is None else environ
    record2sample: Record2Sample = classes.record2sample.from_config(
        scenario.pipeline.record2sample.config, context=context, environ=env
    )
    sample2job: Sample2Job = classes.sample2job.from_config(
        scenario.pipeline.sample2job.config,
        context=context,
        record2sample=record2sample,
        environ=env,
    )
    return record2sample, sample2job
