"""The tttd plugin: its entry point registers the recipes and their stages, usable by name in
a deployment, and blocking it skips it."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from pathlib import Path

from reef import PluginKind
from reef.embed import Plugins, load_deployment
from reef.testing import ENTRY_POINT_GROUP
from reef_tttd.processor import SDPOJobData, SDPOSamples, TTTDJobData, TTTDSamples
from reef_tttd.recipe import SDPORecipe, TTTDRecipe


def test_entry_point_is_declared_by_this_distribution() -> None:
    (entry_point,) = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP, name="tttd")
    assert entry_point.value == "reef_tttd.plugin"
    assert entry_point.dist is not None
    assert entry_point.dist.metadata["Name"] == "reef-recipes-tttd"


def test_loading_it_registers_the_recipe_and_its_stages() -> None:
    plugins = Plugins(blocked=())
    plugins.load()
    assert "tttd" not in {f.name for f in plugins.failures}
    assert plugins.resolve(PluginKind.RECIPE, "tttd") is TTTDRecipe
    assert plugins.resolve(PluginKind.RECORD2SAMPLE, "TTTDSamples") is TTTDSamples
    assert plugins.resolve(PluginKind.SAMPLE2JOB, "TTTDJobData") is TTTDJobData
    assert plugins.resolve(PluginKind.RECIPE, "sdpo") is SDPORecipe
    assert plugins.resolve(PluginKind.RECORD2SAMPLE, "SDPOSamples") is SDPOSamples
    assert plugins.resolve(PluginKind.SAMPLE2JOB, "SDPOJobData") is SDPOJobData
    registration = plugins.registration(PluginKind.RECIPE, "tttd")
    assert registration is not None
    assert registration.distribution == "reef-recipes-tttd"
    blocked = Plugins(blocked={"tttd"})
    blocked.load()
    assert blocked.failures == ()
    assert blocked.registration(PluginKind.RECIPE, "tttd") is None


def test_a_deployment_names_the_recipe_without_job_samples() -> None:
    plugins = Plugins(blocked=())
    plugins.load()
    deployment = load_deployment(
        "scenarios:\n  discover:\n    recipe: tttd\n    pipeline:\n"
        "      record2sample: {config: {steps: 4, groups_per_step: 2, rollouts_per_group: 4}}\n",
        plugins=plugins,
        environ={},
    )
    assert deployment.scenarios["discover"].recipe.class_ == "tttd"
    deployment = load_deployment(
        "scenarios:\n  learn:\n    recipe: {class: sdpo, config: {distillation_weight: 0.5}}\n"
        "    pipeline:\n"
        "      record2sample: {config: {steps: 4, groups_per_step: 2, rollouts_per_group: 4}}\n",
        plugins=plugins,
        environ={},
    )
    assert deployment.scenarios["learn"].recipe.class_ == "sdpo"


def test_reef_plugins_lists_them() -> None:
    reef = Path(sys.executable).with_name("reef")
    listing = subprocess.run(
        [str(reef), "plugins"], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    for name in ("tttd", "TTTDSamples", "TTTDJobData", "sdpo", "SDPOSamples", "SDPOJobData"):
        assert any(
            line.split()[:1] == [name] and "reef-recipes-tttd" in line
            for line in listing.splitlines()
        ), listing
