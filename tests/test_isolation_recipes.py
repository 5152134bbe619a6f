"""Each recipe distribution and reef-ecc build a wheel, install alone in a fresh venv with only
their declared dependencies (and the test tools), and pass their own tests there; `sft` appears
in `reef plugins` only when reef-recipes-sft is installed."""

from __future__ import annotations

from pathlib import Path

import pytest
from fresh_venvs import (
    RECIPES,
    ROOT,
    TEST_TOOLS,
    fresh_venv,
    plugin_names,
    run_tests,
    with_test_extra,
)

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("dist", RECIPES)
def test_recipe_installs_alone_and_passes_its_tests(
    dist: str, wheels: Path, tmp_path: Path
) -> None:
    python = fresh_venv(tmp_path / "venv", wheels, with_test_extra(dist), *TEST_TOOLS)
    run_tests(python, ROOT / dist / "tests", tmp_path)
    if dist == "reef-recipes-sft":
        assert "sft" in plugin_names(python, tmp_path)


def test_reef_ecc_installs_alone_and_passes_its_tests(wheels: Path, tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv", wheels, with_test_extra("reef-ecc"), *TEST_TOOLS)
    run_tests(python, ROOT / "reef-ecc" / "tests", tmp_path, marks="not slow")
