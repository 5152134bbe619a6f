"""A package `reef new recipe` writes installs with exactly its declared extras, as its README
says, and passes its tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fresh_venvs import ROOT, fresh_venv, plugin_names, run

from reef.cli import main

pytestmark = pytest.mark.slow


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
