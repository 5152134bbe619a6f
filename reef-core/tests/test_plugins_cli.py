"""The `reef` command: `reef plugins` and `reef check`, run as the user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


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
    tmp_path: Path,
) -> None:
    """``reef plugins`` lists ``tinker`` and ``slime`` when their extras are installed; without
    Tinker's SDK (here hidden by a module that cannot be imported, as when it is not installed)
    it lists ``tinker`` as not installed and names the extra to install."""
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
    hidden = tmp_path / "hide"
    hidden.mkdir()
    (hidden / "tinker.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tinker'\", name='tinker')\n"
    )
    path = os.pathsep.join([str(hidden), os.environ.get("PYTHONPATH", "")])
    without = reef("plugins", "--json", env_extra={"PYTHONPATH": path})
    listing = json.loads(without.stdout)
    assert "tinker" not in {r["name"] for r in listing["registered"]}
    assert {
        "name": "tinker",
        "missing": "tinker",
        "install": "pip install 'reef-core[tinker]'",
    } in listing["unavailable"]
    table = reef("plugins", env_extra={"PYTHONPATH": path}).stdout
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
