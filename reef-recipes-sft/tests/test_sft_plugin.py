"""The sft plugin: registration through its entry point, and the settings of its stages."""

from __future__ import annotations

import pytest

from reef import PipelineContext, PluginConfigError, PluginKind
from reef.embed import DeploymentError, Plugins, load_deployment
from reef_sft.processor import SFTJobData, SFTSamples
from reef_sft.recipe import SFTRecipe


@pytest.fixture
def plugins() -> Plugins:
    loaded = Plugins(blocked=())
    loaded.load()
    return loaded


def test_entry_point_registers_the_recipe_and_both_stages(plugins: Plugins) -> None:
    assert plugins.resolve(PluginKind.RECIPE, "sft") is SFTRecipe
    assert plugins.resolve(PluginKind.RECORD2SAMPLE, "SFTSamples") is SFTSamples
    assert plugins.resolve(PluginKind.SAMPLE2JOB, "SFTJobData") is SFTJobData
    registration = plugins.registration(PluginKind.RECIPE, "sft")
    assert registration is not None
    assert registration.distribution == "reef-recipes-sft"
    assert registration.plugin == "sft"


def test_sft_samples_refuses_max_staleness() -> None:
    """rule: P-STALE-12 -- SFTSamples does not take max_staleness."""
    with pytest.raises(PluginConfigError) as info:
        SFTSamples.Settings.parse({"max_staleness": 1}, plugin_class=SFTSamples)
    assert info.value.plugin == "SFTSamples"
    assert info.value.key == "$.max_staleness"


def test_sft_samples_is_never_stale() -> None:
    """rule: P-STALE-12 -- SFTSamples' is_stale is always False."""
    stage = SFTSamples.__new__(SFTSamples)  # is_stale reads no state of the stage
    assert stage.is_stale(None) is False  # type: ignore[arg-type]


def test_a_deployment_without_job_samples_fails_the_recipe(plugins: Plugins) -> None:
    """A weight recipe has no default job_samples (RecipeConfigError) in a scenario that
    trains; one without a training section builds no pipeline and only records."""
    trains = "training: {component: 'reef.testing.components:RecordingComponent'}"
    with pytest.raises(DeploymentError) as info:
        load_deployment(
            f"scenarios: {{support: {{recipe: sft, {trains}}}}}", plugins=plugins, environ={}
        )
    recording = load_deployment("scenarios: {support: {recipe: sft}}", plugins=plugins, environ={})
    assert recording.scenarios["support"].trainings == ()
    assert (
        "SFTRecipe: a weight recipe has no default job_samples: set it (usually to the training"
        " component's batch size, so one job is one optimizer step)"
        " @ $.scenarios.support.pipeline.sample2job.config.job_samples"
    ) in info.value.problems


def test_a_full_sft_deployment_loads(plugins: Plugins) -> None:
    deployment = load_deployment(
        "scenarios:\n  support:\n    recipe: sft\n    pipeline:\n"
        "      sample2job: {config: {job_samples: 4, buffer_size: 8}}\n",
        plugins=plugins,
        environ={},
    )
    config = deployment.scenarios["support"].pipeline.sample2job.config
    stage = SFTJobData.from_config(
        config,
        context=PipelineContext("support", "c"),
        record2sample=SFTSamples(PipelineContext("support", "c")),
        environ={},
    )
    assert (stage.job_samples, stage.buffer_size) == (4, 8)
