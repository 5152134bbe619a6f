"""The deployment file: safe YAML, ${ENV} references, and every problem reported with its path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import pytest

from reef.core.config import config_option
from reef.core.deployment import DeploymentError
from reef.core.plugins import (
    PluginConfigError,
    PluginSettings,
    RecipeConfigError,
    Record2SampleSettings,
)
from reef.plugins import Plugins
from reef.plugins.scenarios import load_deployment
from reef.recipe import PipelineSpec, Recipe
from reef.recipe.grouped.processor import GroupedJobData
from reef.record2sample.stage import Record2Sample
from reef.storage import Database
from reef.testing import inline_plugins
from reef.train.stages import build_pipeline, check_stages


class TestSamples:
    __test__ = False
    Settings: ClassVar[type[PluginSettings]] = Record2SampleSettings


@attrs.frozen
class JobSettings(PluginSettings):
    job_samples: int = config_option(help="the fewest samples of one job")


class TestJobData:
    __test__ = False
    Settings: ClassVar[type[PluginSettings]] = JobSettings


class WeightRecipe(Recipe):
    requires_job_samples: ClassVar[bool] = True

    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        return PipelineSpec(record2sample="TestSamples", sample2job="TestJobData")


class LocalComponent:
    pass


@pytest.fixture
def plugins() -> Plugins:
    return inline_plugins(
        recipes={"weights": WeightRecipe},
        record2sample={"TestSamples": TestSamples},
        sample2job={"TestJobData": TestJobData},
        components={"local": LocalComponent},
    )


GOOD = f"""
storage: {{url: "sqlite:///${{DATA}}/reef.db"}}
serving: {{engine: "http://127.0.0.1:8001/v1", api_key: "${{ENGINE_KEY}}"}}
auth:
  tokens:
    ci: {{token: "${{CI_TOKEN}}", scopes: [feedback], scenarios: [support]}}
scenarios:
  support:
    recipe: weights
    pipeline:
      record2sample: {{config: {{max_staleness: 2}}}}
      sample2job: {{class: "{__name__}:TestJobData", config: {{job_samples: 8}}}}
    training: {{component: local}}
"""
ENV = {"DATA": "/var/reef", "ENGINE_KEY": "k", "CI_TOKEN": "ci-secret-for-tests"}


def load(text: str, plugins: Plugins, environ: Mapping[str, str] = ENV) -> Any:
    return load_deployment(text, plugins=plugins, environ=environ)


def problems_of(text: str, plugins: Plugins, environ: Mapping[str, str] = ENV) -> tuple[str, ...]:
    with pytest.raises(DeploymentError) as info:
        load(text, plugins, environ)
    return info.value.problems


def test_a_good_deployment_loads_with_env_references(plugins: Plugins) -> None:
    deployment = load(GOOD, plugins)
    assert deployment.storage.url == "sqlite:////var/reef/reef.db"
    assert deployment.serving_of("support").api_key == "k"
    assert deployment.auth.tokens["ci"].token == "ci-secret-for-tests"
    assert deployment.auth.tokens["ci"].scopes == ("feedback",)
    scenario = deployment.scenarios["support"]
    assert scenario.recipe.class_ == "weights"
    assert scenario.pipeline.record2sample.config == {"max_staleness": 2}
    assert deployment.storage_of("support") is deployment.storage


def test_a_missing_env_variable_is_an_error_naming_it_and_its_path(plugins: Plugins) -> None:
    problems = problems_of(GOOD, plugins, {"DATA": "/x", "ENGINE_KEY": "k"})
    assert problems == (
        "environment variable CI_TOKEN is not set: the file reads it as ${CI_TOKEN}; set it in"
        " the environment reef runs in (e.g. CI_TOKEN=... reef check FILE)"
        " @ $.auth.tokens.ci.token",
    )


def test_every_problem_of_the_file_is_reported_with_its_path(plugins: Plugins) -> None:
    """rule: P-STG-13 -- reading the deployment checks the stage classes and their configs."""
    text = """
storage: {url: 5}
scenarioz: {}
scenarios:
  support:
    recipe: weights
    pipeline:
      record2sample: {config: {max_staleness: -1, job_samples: 3}}
      sample2job: {config: {job_sample: 8}}
    training: {component: locl}
  other:
    recipe: nope
  third:
    recipe: weights
    pipline: {}
"""
    problems = problems_of(text, plugins)
    expected = [
        "@ $.storage.url",
        "unknown key 'scenarioz', did you mean 'scenarios'? @ $.scenarioz",
        "unknown key 'pipline', did you mean 'pipeline'? @ $.scenarios.third.pipline",
        "TestSamples: 'max_staleness' must be >= 0: -1"
        " @ $.scenarios.support.pipeline.record2sample.config.max_staleness",
        "TestSamples: unknown key 'job_samples'; valid keys: max_staleness"
        " @ $.scenarios.support.pipeline.record2sample.config.job_samples",
        "TestJobData: unknown key 'job_sample', did you mean 'job_samples'?"
        " @ $.scenarios.support.pipeline.sample2job.config.job_sample",
        "WeightRecipe: a weight recipe has no default job_samples",
        "unknown component 'locl'; did you mean 'local'?",
        "unknown recipe 'nope' (installed recipe names: weights; or write module:Class)"
        " @ $.scenarios.other.recipe",
    ]
    for fragment in expected:
        assert any(fragment in p for p in problems), (fragment, problems)
    assert any(p.endswith("@ $.scenarios.support.training.component") for p in problems)


def test_a_scenario_that_only_records_needs_no_training_settings() -> None:
    """rule: P-SIZE-2 -- the job size a weight recipe needs is checked for the pipeline its
    trainers build: a scenario without a training section builds none, so it records with the
    recipe alone, and adding the section asks for job_samples."""
    installed = Plugins(blocked=())
    installed.load()
    recording = load("scenarios: {collect: {recipe: grouped}}", installed)
    assert recording.scenarios["collect"].trainings == ()
    trains = "training: {component: 'reef.testing.components:RecordingComponent'}"
    problems = problems_of(f"scenarios: {{collect: {{recipe: grouped, {trains}}}}}", installed)
    assert problems == (
        "GroupedRecipe: a weight recipe has no default job_samples: set it (usually to the"
        " training component's batch size, so one job is one optimizer step)"
        " @ $.scenarios.collect.pipeline.sample2job.config.job_samples",
    )


def test_safe_load_refuses_python_tags(plugins: Plugins) -> None:
    text = "scenarios: !!python/object/apply:os.system ['echo pwned']\n"
    (problem,) = problems_of(text, plugins)
    assert problem.startswith("not valid YAML")


def test_a_deployment_needs_a_scenario(plugins: Plugins) -> None:
    assert "required key missing" in problems_of("storage: {url: x}", plugins)[0]
    assert problems_of("scenarios: {}", plugins) == (
        "a deployment needs at least one scenario @ $.scenarios",
    )


def test_a_scenario_can_override_storage_and_serving(plugins: Plugins) -> None:
    text = GOOD.replace(
        "    training: {component: local}",
        "    training: {component: local}\n    storage: {url: 'sqlite:///s.db'}\n"
        "    serving: {engine: 'http://e/v1'}",
    )
    deployment = load(text, plugins)
    assert deployment.storage_of("support").url == "sqlite:///s.db"
    assert deployment.serving_of("support").engine == "http://e/v1"


def test_recipe_may_be_written_with_class_and_config(plugins: Plugins) -> None:
    text = GOOD.replace("recipe: weights", "recipe: {class: weights, config: {x: 1}}")
    (problem,) = problems_of(text, plugins)
    assert problem == (
        "WeightRecipe: unknown key 'x': this plugin takes no keys"
        " @ $.scenarios.support.recipe.config.x"
    )


class OneUnitJobData(GroupedJobData):
    """A fixed-unit stage: one job holds at most two samples (P-SIZE-4)."""

    @classmethod
    def max_job_samples_for(cls, record2sample: Record2Sample) -> int | None:
        return 2


def test_a_deployment_error_is_also_the_refusing_stages_own_error(
    storage_database: Database,
) -> None:
    """rule: P-SIZE-2 P-SIZE-4 -- the documented types are caught by code that embeds Reef: a
    weight recipe without job_samples fails reading the deployment with an error that is a
    DeploymentError and a RecipeConfigError; a fixed-unit stage asked for more than its unit
    fails building the trainer's pipeline (the real build_pipeline, and reef check's
    check_stages) with a DeploymentError that is a PluginConfigError. Each names the key at
    its path in the file; the message is the deployment error's."""
    installed = Plugins(blocked=())
    installed.load()
    trains = "training: {component: 'reef.testing.components:RecordingComponent'}"
    with pytest.raises(RecipeConfigError) as recipe_error:
        load(f"scenarios: {{collect: {{recipe: grouped, {trains}}}}}", installed)
    assert isinstance(recipe_error.value, DeploymentError)
    assert recipe_error.value.key == "$.scenarios.collect.pipeline.sample2job.config.job_samples"
    assert str(recipe_error.value).startswith("<deployment>: 1 problem(s)\n  GroupedRecipe: ")

    one_unit = f"{__name__}:OneUnitJobData"
    text = (
        "scenarios:\n  grid:\n    recipe: grouped\n    pipeline:\n"
        f"      sample2job: {{class: '{one_unit}', config: {{job_samples: 3}}}}\n    {trains}\n"
    )
    deployment = load(text, installed)  # the stage's own check runs when it is built
    section = deployment.scenarios["grid"]
    with pytest.raises(PluginConfigError) as stage_error:
        build_pipeline("grid", section, plugins=installed, database=storage_database)
    assert isinstance(stage_error.value, DeploymentError)
    assert not isinstance(stage_error.value, RecipeConfigError)
    assert stage_error.value.key == "$.job_samples"  # the stage's own, as it raised it
    (problem,) = stage_error.value.problems
    assert problem.endswith("set job_samples to at most 2 @ $.scenarios.grid.pipeline"
                            ".sample2job.config.job_samples")  # fmt: skip
    with pytest.raises(PluginConfigError) as checked:
        check_stages(deployment, plugins=installed)
    assert isinstance(checked.value, DeploymentError)
    assert checked.value.problems == (problem,)
