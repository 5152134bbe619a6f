"""The storage fixtures reach every test through reef-core's ``pytest11`` entry point: no test
module or conftest of the workspace declares ``pytest_plugins`` for them."""

from __future__ import annotations

import ast
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_reef_core_registers_the_storage_fixtures_as_a_pytest_plugin() -> None:
    registered = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    # named as the module, so that a leftover pytest_plugins line of it is a no-op
    assert registered.get("reef.testing.storage") == "reef.testing.storage"


def test_a_test_gets_the_fixtures_without_declaring_them(storage_url: str) -> None:
    assert storage_url.startswith(("sqlite:", "postgresql"))


def test_no_test_source_declares_pytest_plugins() -> None:
    declaring = []
    tops = [top for top in ROOT.iterdir() if top.is_dir() and not top.name.startswith(".")]
    for path in sorted(p for top in tops for p in top.glob("**/*.py")):
        if "tests" not in path.parts and path.name != "conftest.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else []
            if any(isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in targets):
                declaring.append(str(path.relative_to(ROOT)))
    assert declaring == []
