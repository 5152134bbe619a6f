"""The `reef` command: `reef plugins` and `reef check`, run as the user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from reef.cli import main
from reef.testing import write_distribution


def reef(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run(
        [sys.executable, "-m", "reef.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_plugins_lists_core_names_with_distribution_and_version() -> None:
    done = reef("plugins", "--json")
    assert done.returncode == 0, done.stderr
    rows = {r["name"]: r for r in json.loads(done.stdout)["registered"]}
    assert rows["NoSamples"]["kind"] == "record2sample"
    assert rows["NoSamples"]["distribution"] == "reef-core"
    table = reef("plugins").stdout
    assert table.splitlines()[0].split()[:4] == ["NAME", "KIND", "DISTRIBUTION", "VERSION"]


def test_plugins_lists_the_components_whose_extras_are_installed_and_says_how_to_add_the_rest(
    without_modules: Callable[..., dict[str, str]],
) -> None:
    """``reef plugins`` lists ``tinker`` and ``slime`` when their extras are installed; without
    Tinker's SDK it lists ``tinker`` as not installed and names the extra to install."""
    import importlib.util

    done = reef("plugins", "--json")
    components = {
        r["name"]: r["class"]
        for r in json.loads(done.stdout)["registered"]
        if r["kind"] == "component"
    }
    if importlib.util.find_spec("tinker") is not None:
        assert components["tinker"] == "reef.components.tinker.component:TinkerComponent"
    if importlib.util.find_spec("jinja2") is not None:
        assert components["slime"] == "reef.components.slime.component:SlimeComponent"
    env = without_modules("tinker")
    without = reef("plugins", "--json", env_extra=env)
    listing = json.loads(without.stdout)
    assert "tinker" not in {r["name"] for r in listing["registered"]}
    assert {
        "name": "tinker",
        "missing": "tinker",
        "install": "pip install 'reef-core[tinker]'",
    } in listing["unavailable"]
    table = reef("plugins", env_extra=env).stdout
    assert (
        "not installed: component tinker needs the tinker package: pip install 'reef-core[tinker]'"
        in table
    )


def test_blocking_core_removes_its_names() -> None:
    done = reef("plugins", "--json", env_extra={"REEF_BLOCK_PLUGINS": "core"})
    listing = json.loads(done.stdout)
    assert "NoSamples" not in {r["name"] for r in listing["registered"]}
    assert listing["blocked"] == ["core"]


def test_check_prints_every_problem_and_fails(tmp_path: Path) -> None:
    path = tmp_path / "deployment.yaml"
    path.write_text(
        "storage: {url: 1}\nscenarios:\n  s:\n    recipe: no-such-recipe\n", encoding="utf-8"
    )
    done = reef("check", str(path))
    assert done.returncode == 1
    assert "expected str, got int 1 @ $.storage.url" in done.stderr
    assert "unknown recipe 'no-such-recipe'" in done.stderr
    assert "@ $.scenarios.s.recipe" in done.stderr


PROMISING = """
from reef import PipelineSpec, Recipe, hookimpl

class SoonRecipe(Recipe):
    @classmethod
    def pipeline_spec(cls):
        return PipelineSpec(record2sample="SoonSamples", sample2job="GroupedJobData")

@hookimpl
def reef_register_recipes(registry):
    registry.register("soon", SoonRecipe)
"""


def test_plugins_lists_what_is_installed_truthfully(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An installed plugin that registers nothing yet is listed; a recipe whose stages are not
    installed is listed as not usable, saying which stage is missing."""
    module = f"soon_{tmp_path.name.replace('-', '_')}"
    root = write_distribution(
        tmp_path / "dists",
        name="soon-recipes",
        version="0.0.1",
        plugins={"soon": module, "later": f"{module}_empty"},
        modules={f"{module}.py": PROMISING, f"{module}_empty.py": '"""Nothing yet."""\n'},
    )
    monkeypatch.syspath_prepend(str(root))
    assert main(["plugins", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    recipes = {r["name"]: r for r in listing["registered"] if r["kind"] == "recipe"}
    assert recipes["soon"]["not_usable"] == [
        "its record2sample stage 'SoonSamples' is not installed"
    ]
    assert recipes["grouped"]["not_usable"] == []
    assert {"name": "later", "distribution": "soon-recipes", "version": "0.0.1"} in listing[
        "plugins"
    ]
    assert main(["plugins"]) == 0
    table = capsys.readouterr().out
    assert (
        "not usable: recipe soon: its record2sample stage 'SoonSamples' is not installed" in table
    )
    assert "registers nothing yet: plugin later (soon-recipes 0.0.1)" in table
