"""Extensions: plugins configured per scenario in the deployment file, told when it starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import attrs
import pytest

from reef.core.config import config_option
from reef.core.deployment import DeploymentError
from reef.core.plugins import PluginSettings
from reef.hookspecs import hookimpl
from reef.plugins import PluginKind, Plugins
from reef.plugins.scenarios import load_deployment, scenario_classes
from reef.recipe import PipelineSpec, Recipe
from reef.record2sample.no_samples import NoSamples
from reef.testing import inline_plugins


class PlainRecipe(Recipe):
    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        return PipelineSpec(record2sample="NoSamples", sample2job="NoJobs")


class NoJobs:
    Settings: ClassVar[type[PluginSettings]] = PluginSettings


@attrs.frozen
class SealSettings(PluginSettings):
    journal_dir: str = config_option(help="where the journals are kept")
    mode: str = config_option(default="repair", help="repair, discard or audit")


class Started:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Mapping[str, PluginSettings]]] = []

    @hookimpl
    def reef_scenario_started(self, scenario: str, extensions: Mapping[str, Any]) -> None:
        self.calls.append((scenario, extensions))


@pytest.fixture
def plugins() -> Plugins:
    return inline_plugins(
        recipes={"plain": PlainRecipe},
        record2sample={"NoSamples": NoSamples},
        sample2job={"NoJobs": NoJobs},
        extensions={"seal": SealSettings},
    )


def deployment(extensions: str) -> str:
    return f"""
scenarios:
  support:
    recipe: plain
    extensions: {extensions}
"""


def test_an_extension_is_configured_per_scenario_and_parsed(plugins: Plugins) -> None:
    loaded = load_deployment(deployment("{seal: {journal_dir: /tmp/j}}"), plugins=plugins)
    classes = scenario_classes("support", loaded.scenarios["support"], plugins)
    assert classes is not None
    assert classes.extensions == {"seal": SealSettings(journal_dir="/tmp/j")}
    assert plugins.resolve(PluginKind.EXTENSION, "seal") is SealSettings


def test_extension_problems_are_reported_with_their_paths(plugins: Plugins) -> None:
    text = deployment("{seal: {journal_dirr: /tmp/j}, sael: {}}")
    with pytest.raises(DeploymentError) as caught:
        load_deployment(text, plugins=plugins)
    problems = "\n".join(caught.value.problems)
    assert "did you mean 'journal_dir'? @ $.scenarios.support.extensions.seal.journal_dirr" in (
        problems
    )
    assert "required key missing" in problems
    assert "$.scenarios.support.extensions.sael" in problems
    assert "seal" in problems.split("$.scenarios.support.extensions.sael")[0]


def test_scenario_started_reaches_every_extension_hook(plugins: Plugins) -> None:
    started = Started()
    plugins.register(started, "listener")
    settings = SealSettings(journal_dir="/j")
    plugins.scenario_started("support", {"seal": settings})
    assert started.calls == [("support", {"seal": settings})]
