"""Each distribution builds a wheel, installs alone in a fresh venv with only its declared
dependencies (plus pytest and hypothesis), and passes its own tests there; `sft` appears in
`reef plugins` only when reef-recipes-sft is installed; and a package `reef new recipe` writes
installs with exactly its declared extras, as its README says, and passes its tests."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from reef.cli import main

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ["reef-recipes-sft", "reef-recipes-distill", "reef-recipes-tttd", "reef-recipes-spade"]


def run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def run_tests(python: Path, tests: Path, cwd: Path, *, marks: str | None = None) -> None:
    """Run the distribution's tests folder ``tests`` with the venv's ``python``."""
    selection = ["-m", marks] if marks else []
    run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection, tests, cwd=cwd)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheels")
    for dist in ["reef-core", *RECIPES, "reef-ecc"]:
        run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, ROOT / dist)
    return out


def with_test_extra(dist: str) -> str:
    """``dist[test]`` when the distribution declares test-only dependencies as a ``test`` extra."""
    project = tomllib.loads((ROOT / dist / "pyproject.toml").read_text(encoding="utf-8"))
    extras = project["project"].get("optional-dependencies", {})
    return f"{dist}[test]" if "test" in extras else dist


def fresh_venv(path: Path, wheels: Path, *requirements: str) -> Path:
    venv.create(path, with_pip=True)
    python = path / "bin" / "python"
    run(python, "-m", "pip", "install", "-q", "--find-links", wheels, *requirements)
    return python


def plugin_names(python: Path, cwd: Path) -> set[str]:
    listing = json.loads(run(python, "-m", "reef.cli", "plugins", "--json", cwd=cwd))
    return {row["name"] for row in listing["registered"]}


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory: pytest.TempPathFactory, wheels: Path) -> Path:
    return fresh_venv(
        tmp_path_factory.mktemp("core") / "venv",
        wheels,
        with_test_extra("reef-core"),
        "pytest",
        "hypothesis",
    )


def test_core_alone_has_no_sft_and_passes_its_tests(core_venv: Path, tmp_path: Path) -> None:
    assert "sft" not in plugin_names(core_venv, tmp_path)
    run_tests(core_venv, ROOT / "reef-core" / "tests", tmp_path, marks="not slow and not postgres")


@pytest.mark.parametrize("dist", RECIPES)
def test_recipe_installs_alone_and_passes_its_tests(
    dist: str, wheels: Path, tmp_path: Path
) -> None:
    python = fresh_venv(tmp_path / "venv", wheels, with_test_extra(dist), "pytest", "hypothesis")
    run_tests(python, ROOT / dist / "tests", tmp_path)
    if dist == "reef-recipes-sft":
        assert "sft" in plugin_names(python, tmp_path)


def test_reef_ecc_installs_alone_and_passes_its_tests(wheels: Path, tmp_path: Path) -> None:
    python = fresh_venv(
        tmp_path / "venv", wheels, with_test_extra("reef-ecc"), "pytest", "hypothesis"
    )
    run_tests(python, ROOT / "reef-ecc" / "tests", tmp_path, marks="not slow")


def test_a_new_recipe_package_installs_with_its_declared_extras_and_passes_its_tests(
    wheels: Path, tmp_path: Path
) -> None:
    """rule: P-LAYOUT-4 what the package's README says, in a fresh venv with reef-core from the
    built wheels (it is on no index): ``pip install -e '.[test]'``, ``pytest``, ``reef plugins``,
    ``reef check deployment.yaml``; nothing else is installed. Reef's layout test passes there
    too, with the package installed."""
    assert main(["new", "recipe", "votes", "--directory", str(tmp_path)]) == 0
    package = tmp_path / "reef-recipe-votes"
    python = fresh_venv(tmp_path / "venv", wheels, "-e", f"{package}[test]")
    tests = run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=package)
    assert " passed" in tests
    assert "skipped" not in tests or "REEF_TEST_DATABASE_URL" not in os.environ, tests
    assert {"votes", "VotesSamples"} <= plugin_names(python, package)
    reef = python.parent / "reef"
    assert run(reef, "check", "deployment.yaml", cwd=package).strip() == (
        "deployment.yaml: ok (votes)"
    )
    layout_test = (
        f"{ROOT}/reef-core/tests/test_pipeline_rules.py"
        "::test_installed_recipes_keep_their_own_stages_in_their_processor_module"
    )
    # reef-core's own pytest options name Hypothesis's profile; this venv has no Hypothesis.
    options = ["-o", "addopts=--import-mode=importlib"]
    run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, layout_test, cwd=tmp_path)


#: A reference to another site: a scheme or a protocol-relative "//host.tld".
OTHER_SITE = re.compile(r"(?:[a-z][a-z0-9+.-]*:)?//[a-z0-9-]+(?:\.[a-z0-9-]+)+", re.IGNORECASE)
#: The one such text the console holds: the SVG namespace, a name that is never fetched.
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


def test_the_core_wheel_ships_the_console_page(wheels: Path, tmp_path: Path) -> None:
    """The console's files are package data of reef-core's wheel, byte for byte, and name no
    other site (no CDN); the package read from the wheel finds every one of them, as `reef
    serve` does, with nothing built at install time."""
    [wheel] = wheels.glob("reef_core-*.whl")
    folder = ROOT / "reef-core" / "src" / "reef" / "server" / "console"
    files = {path.name: path.read_bytes() for path in folder.iterdir()}
    assert {"index.html", "app.js", "console.css"} <= set(files)
    with zipfile.ZipFile(wheel) as archive:
        shipped = {
            name: archive.read(f"reef/server/console/{name}")
            for name in files
            if f"reef/server/console/{name}" in archive.namelist()
        }
        archive.extractall(tmp_path / "wheel")
    assert shipped == files
    for name, content in files.items():
        found = OTHER_SITE.findall(content.decode("utf-8").replace(SVG_NAMESPACE, ""))
        assert not found, (name, found)
    served = run(
        sys.executable,
        "-c",
        "import json, sys; sys.path.insert(0, sys.argv[1]); import reef.server.console as c;"
        " print(json.dumps([c.__file__, sorted(c.console_files())]))",
        tmp_path / "wheel",
    )
    module, names = json.loads(served)
    assert Path(module).is_relative_to(tmp_path / "wheel"), module
    assert names == sorted(files), names
