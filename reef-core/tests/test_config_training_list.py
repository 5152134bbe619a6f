"""A scenario's ``training`` section: one component (a mapping, as before) or a list of them,
one trainer each; what ``reef check`` refuses about the list and about which one the engine
serves."""

from __future__ import annotations

from typing import Any, ClassVar

import attrs
import pytest

from reef.core.config import config_option
from reef.core.deployment import Deployment, DeploymentError
from reef.core.plugins import NoSettings, PluginSettings
from reef.plugins import Plugins
from reef.plugins.scenarios import load_deployment, scenario_classes
from reef.recipe import PipelineSpec, Recipe
from reef.testing import inline_plugins
from reef.train.stages import scenario_trainers


class Samples:
    Settings: ClassVar[type[PluginSettings]] = NoSettings


class Jobs:
    Settings: ClassVar[type[PluginSettings]] = NoSettings


class PlainRecipe(Recipe):
    @classmethod
    def pipeline_spec(cls) -> PipelineSpec:
        return PipelineSpec(record2sample="Samples", sample2job="Jobs")


@attrs.frozen
class RateSettings(PluginSettings):
    rate: float = config_option(help="the learning rate")


@attrs.frozen
class FolderSettings(PluginSettings):
    state_options: ClassVar[tuple[str, ...]] = ("folder",)

    folder: str = config_option(help="where the component keeps its state")
    rate: float = config_option(1.0, help="the learning rate")


class RateComponent:
    Settings: ClassVar[type[PluginSettings]] = RateSettings


class FolderComponent:
    Settings: ClassVar[type[PluginSettings]] = FolderSettings


class OtherComponent:
    Settings: ClassVar[type[PluginSettings]] = RateSettings


@pytest.fixture
def plugins() -> Plugins:
    return inline_plugins(
        recipes={"plain": PlainRecipe},
        record2sample={"Samples": Samples},
        sample2job={"Jobs": Jobs},
        components={
            "rate": RateComponent,
            "other": OtherComponent,
            "folder": FolderComponent,
        },
    )


def deployment(training: str, serving: str = "") -> str:
    return f"""
scenarios:
  s:
    recipe: plain
{serving}
    training: {training}
"""


def problems(text: str, plugins: Plugins) -> tuple[str, ...]:
    with pytest.raises(DeploymentError) as info:
        load_deployment(text, plugins=plugins, environ={})
    return info.value.problems


def load(text: str, plugins: Plugins) -> Deployment:
    return load_deployment(text, plugins=plugins, environ={})


def test_a_single_mapping_is_the_scenarios_only_trainer_as_before(plugins: Plugins) -> None:
    loaded = load(deployment("{component: rate, options: {rate: 0.1}}"), plugins)
    section = loaded.scenarios["s"]
    assert scenario_trainers(section) == ("rate",)
    (entry,) = section.trainings
    assert entry.options == {"rate": 0.1}
    classes = scenario_classes("s", section, plugins)
    assert classes is not None
    assert dict(classes.components) == {"rate": RateComponent}
    # Its problems keep the paths they had before lists existed.
    assert problems(deployment("{component: rate, options: {rat: 1}}"), plugins) == (
        "RateComponent: unknown key 'rat', did you mean 'rate'?"
        " @ $.scenarios.s.training.options.rat",
        "RateComponent: required key missing (the learning rate)"
        " @ $.scenarios.s.training.options.rate",
    )


def test_a_list_makes_one_trainer_per_entry_each_with_its_own_options(plugins: Plugins) -> None:
    text = deployment(
        "[{component: rate, name: fast, options: {rate: 0.5}},"
        " {component: rate, name: slow, options: {rate: 0.01}},"
        " {component: other, options: {rate: 1}}]"
    )
    section = load(text, plugins).scenarios["s"]
    assert scenario_trainers(section) == ("fast", "slow", "other")
    assert [entry.options for entry in section.trainings] == [
        {"rate": 0.5},
        {"rate": 0.01},
        {"rate": 1},
    ]
    classes = scenario_classes("s", section, plugins)
    assert classes is not None
    assert dict(classes.components) == {
        "fast": RateComponent,
        "slow": RateComponent,
        "other": OtherComponent,
    }


def test_each_entrys_problems_are_reported_at_its_index(plugins: Plugins) -> None:
    text = deployment(
        "[{component: rate, options: {rate: 0.5}}, {component: nothing},"
        " {component: other, options: {rate: fast}}, {component: rate, option: {}}]"
    )
    found = problems(text, plugins)
    assert "unknown key 'option', did you mean 'options'? @ $.scenarios.s.training[3].option" in (
        found
    )
    # The entries that read are checked too, each at its own index.
    text = deployment(
        "[{component: rate, options: {rate: 0.5}}, {component: nothing},"
        " {component: other, options: {rate: fast}}]"
    )
    found = problems(text, plugins)
    assert any(p.endswith("@ $.scenarios.s.training[1].component") for p in found), found
    assert any(p.endswith("@ $.scenarios.s.training[2].options.rate") for p in found), found
    assert not any("training[0]" in p for p in found), found


def test_an_empty_list_is_refused(plugins: Plugins) -> None:
    assert problems(deployment("[]"), plugins) == (
        "an empty list trains nothing: give one entry per training component, or remove the"
        " training section @ $.scenarios.s.training",
    )


def test_two_entries_of_one_trainer_are_refused_and_told_to_name_them(plugins: Plugins) -> None:
    same_component = deployment(
        "[{component: rate, options: {rate: 1}}, {component: rate, options: {rate: 2}}]"
    )
    assert problems(same_component, plugins) == (
        "entries 0 and 1 are both trainer 'rate': a scenario has one trainer per component;"
        " give each entry of the same component its own name @ $.scenarios.s.training",
    )
    same_name = deployment(
        "[{component: rate, name: a, options: {rate: 1}},"
        " {component: other, name: a, options: {rate: 2}}]"
    )
    assert "entries 0 and 1 are both trainer 'a'" in problems(same_name, plugins)[0]
    # A name may be another entry's component name: the trainer ids are what must differ.
    named_after = deployment(
        "[{component: rate, name: other, options: {rate: 1}},"
        " {component: other, options: {rate: 2}}]"
    )
    assert "entries 0 and 1 are both trainer 'other'" in problems(named_after, plugins)[0]


@pytest.mark.parametrize("name", ["", "a:b", "two words", "-x"])
def test_a_trainer_name_that_cannot_prefix_ids_is_refused(plugins: Plugins, name: str) -> None:
    (problem,) = problems(deployment(f"[{{component: rate, name: '{name}'}}]"), plugins)[:1]
    assert problem.startswith(f"name {name!r} must start with a letter or digit"), problem
    assert problem.endswith("@ $.scenarios.s.training[0].name")


def test_a_training_section_that_is_neither_a_mapping_nor_a_list(plugins: Plugins) -> None:
    assert problems(deployment("rate"), plugins) == (
        "expected a mapping, got str @ $.scenarios.s.training",
    )


TWO = (
    "[{component: rate, name: a, options: {rate: 1}},"
    " {component: rate, name: b, options: {rate: 2}}]"
)
MARKED = (
    "[{component: rate, name: a, options: {rate: 1}},"
    " {component: rate, name: b, serves: true, options: {rate: 2}}]"
)
LOCAL = "    serving: {engine: local}"
SGLANG = "    serving: {engine: sglang, url: 'http://127.0.0.1:30000', model: m}"
URL = "    serving: {engine: 'http://127.0.0.1:8001/v1'}"


@pytest.mark.parametrize("serving", [LOCAL, SGLANG])
def test_several_components_and_a_weight_engine_need_the_served_one_named(
    plugins: Plugins, serving: str
) -> None:
    (problem,) = problems(deployment(TWO, serving), plugins)
    assert problem.endswith(
        "serves the artifacts of one training component, and the scenario has 2 (a, b):"
        " set serves: true on the one it serves @ $.scenarios.s.training"
    ), problem
    loaded = load(deployment(MARKED, serving), plugins)
    served = loaded.served_training("s")
    assert served is not None
    assert served.trainer == "b"


def test_the_only_component_serves_unless_it_says_not(plugins: Plugins) -> None:
    one = load(deployment("{component: rate, options: {rate: 1}}", LOCAL), plugins)
    served = one.served_training("s")
    assert served is not None
    assert served.trainer == "rate"
    listed = load(deployment("[{component: rate, options: {rate: 1}}]", SGLANG), plugins)
    served = listed.served_training("s")
    assert served is not None
    assert served.trainer == "rate"
    quiet_entry = "{component: rate, serves: false, options: {rate: 1}}"
    quiet = load(deployment(quiet_entry, SGLANG), plugins)
    assert quiet.served_training("s") is None


def test_two_served_components_are_refused(plugins: Plugins) -> None:
    text = deployment(
        "[{component: rate, name: a, serves: true, options: {rate: 1}},"
        " {component: rate, name: b, serves: true, options: {rate: 2}}]",
        LOCAL,
    )
    assert problems(text, plugins) == (
        "trainers ['a', 'b'] all set serves: true; the engine serves one component's artifacts,"
        " so set it on one entry only @ $.scenarios.s.training",
    )


@pytest.mark.parametrize("serving", [URL, ""])
def test_serves_with_an_engine_that_takes_no_weights_is_refused(
    plugins: Plugins, serving: str
) -> None:
    (problem,) = problems(deployment(MARKED, serving), plugins)
    assert problem.startswith("trainer 'b' sets serves: true, and the scenario has"), problem
    assert problem.endswith(
        "which takes no trained weights: remove serves, or serve the scenario with engine"
        " local, vllm or sglang @ $.scenarios.s.training"
    ), problem
    # Without serves, several components and such an engine need no choice: nothing serves.
    loaded: Any = load(deployment(TWO, serving), plugins)
    assert loaded.served_training("s") is None


def test_two_trainers_that_would_share_a_state_folder_are_refused(plugins: Plugins) -> None:
    text = deployment(
        "[{component: folder, name: a, options: {folder: /srv/reef/a}},"
        " {component: folder, name: b, options: {folder: /srv/reef/b, rate: 2}},"
        " {component: folder, name: c, options: {folder: /srv/reef/./a/, rate: 3}}]"
    )
    assert problems(text, plugins) == (
        "trainers 'a' and 'c' both keep their state in '/srv/reef/./a/': they would overwrite"
        " each other's weights; give each its own folder @ $.scenarios.s.training[2].options"
        ".folder",
    )
    apart = text.replace("/srv/reef/./a/", "/srv/reef/c")
    assert scenario_trainers(load(apart, plugins).scenarios["s"]) == ("a", "b", "c")


def test_two_local_components_in_one_state_dir_are_refused(plugins: Plugins) -> None:
    """The built-in components name their state folder too (local, as tinker: state_dir)."""
    pytest.importorskip("torch")
    local = "reef.components.local.component:LocalComponent"
    text = deployment(
        f"[{{component: '{local}', name: a, options: {{state_dir: /srv/s}}}},"
        f" {{component: '{local}', name: b, options: {{state_dir: /srv/s, learning_rate: 0.1}}}}]"
    )
    assert problems(text, plugins) == (
        "trainers 'a' and 'b' both keep their state in '/srv/s': they would overwrite each"
        " other's weights; give each its own state_dir @ $.scenarios.s.training[1].options"
        ".state_dir",
    )
