"""The recipe packages are written against Reef's public API only: ``reef`` (and, in tests and
in a package's own ``testing`` module for tests, ``reef.testing`` and ``reef.embed``, what loads
plugins and deployments as a program embedding Reef does). A deeper import would tie a recipe to
a module that may move; this test walks their sources and fails on any."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RECIPES = [
    "reef-recipes-sft",
    "reef-recipes-distill",
    "reef-recipes-tttd",
    "reef-recipes-spade",
    "tests/example_recipe",
]


def _allowed(module: str, *, in_tests: bool) -> bool:
    if module == "reef":
        return True
    return in_tests and (
        module in ("reef.testing", "reef.embed") or module.startswith("reef.testing.")
    )


def deep_imports(path: Path, *, in_tests: bool, root: Path = ROOT) -> list[str]:
    """``file:line module`` (relative to ``root``) for each import of a ``reef`` module that
    is not allowed."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module]
        else:
            continue
        for module in modules:
            if module.split(".")[0] == "reef" and not _allowed(module, in_tests=in_tests):
                found.append(f"{path.relative_to(root)}:{node.lineno} {module}")
    return found


def _for_tests(source: Path) -> bool:
    """A package's own ``testing`` module (or package) serves tests, as ``reef.testing`` does."""
    return "testing" in (source.stem, source.parent.name)


@pytest.mark.parametrize("package", RECIPES)
def test_a_recipe_package_imports_only_the_public_api(package: str) -> None:
    sources = sorted((ROOT / package / "src").rglob("*.py"))
    tests = sorted((ROOT / package / "tests").rglob("*.py"))
    assert sources, f"{package} has no sources"
    deep = [hit for path in sources for hit in deep_imports(path, in_tests=_for_tests(path))]
    deep += [hit for path in tests for hit in deep_imports(path, in_tests=True)]
    assert deep == [], "import these names from `reef` (tests: also `reef.testing`, `reef.embed`)"


def test_the_walk_sees_a_deep_import(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        "from reef import Recipe\nfrom reef.core.plugins import PluginSettings\n"
        "def f():\n    import reef.testing.storage\n",
        encoding="utf-8",
    )
    assert deep_imports(module, in_tests=False, root=tmp_path) == [
        "probe.py:2 reef.core.plugins",
        "probe.py:4 reef.testing.storage",
    ]
    assert deep_imports(module, in_tests=True, root=tmp_path) == ["probe.py:2 reef.core.plugins"]


def test_only_a_packages_testing_module_may_import_reef_testing() -> None:
    assert _for_tests(Path("src/reef_tttd/testing.py"))
    assert _for_tests(Path("src/reef_x/testing/serve.py"))
    assert not _for_tests(Path("src/reef_tttd/toy_runner.py"))
