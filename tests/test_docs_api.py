"""The documentation keeps up with the code: every hook is documented with its exact signature,
and every public name of ``reef`` and ``reef.testing`` is documented (as datasette checks its
plugin hooks)."""

from __future__ import annotations

import ast
import pkgutil
import re
from pathlib import Path

import pytest

import reef
import reef.embed
import reef.testing

ROOT = Path(__file__).resolve().parents[1]
HOOKSPECS = ROOT / "reef-core" / "src" / "reef" / "hookspecs.py"
PLUGINS_DOC = ROOT / "docs" / "plugins.md"


def hook_signatures() -> dict[str, str]:
    """Each hook spec's signature as its source writes it: ``name(args) -> returns``."""
    found = {}
    for node in ast.parse(HOOKSPECS.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and any(
            "hookspec" in ast.unparse(decorator) for decorator in node.decorator_list
        ):
            returns = "" if node.returns is None else f" -> {ast.unparse(node.returns)}"
            found[node.name] = f"{node.name}({ast.unparse(node.args)}){returns}"
    return found


def documented_hooks() -> dict[str, str]:
    """The hooks ``docs/plugins.md`` documents: each ``### `reef_...(...)` `` heading."""
    headings = re.findall(r"^### `(reef_\w+\(.*\).*)`$", PLUGINS_DOC.read_text(), re.MULTILINE)
    return {heading.split("(")[0]: heading for heading in headings}


def test_the_hook_specs_are_found() -> None:
    assert len(hook_signatures()) >= 11


@pytest.mark.parametrize("name", sorted(hook_signatures()))
def test_every_hook_is_documented_with_its_exact_signature(name: str) -> None:
    documented = documented_hooks()
    assert name in documented, f"docs/plugins.md documents no hook {name}"
    assert documented[name] == hook_signatures()[name]


def test_the_docs_document_no_hook_that_does_not_exist() -> None:
    assert set(documented_hooks()) <= set(hook_signatures())


def _documented_names(text: str) -> set[str]:
    return set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)", text))


@pytest.mark.parametrize(
    ("module", "exported"),
    [
        ("reef", reef.__all__),
        ("reef.embed", reef.embed.__all__),
        ("reef.testing", reef.testing.__all__),
    ],
)
def test_every_exported_name_is_documented(module: str, exported: list[str]) -> None:
    documented = _documented_names(PLUGINS_DOC.read_text(encoding="utf-8"))
    missing = sorted(name for name in exported if name not in documented and name != "__version__")
    assert missing == [], f"names of {module} that docs/plugins.md does not document"


def test_every_module_of_reef_testing_is_documented() -> None:
    """A test helper a plugin's author cannot find is no help: docs/plugins.md names each
    module of ``reef.testing``."""
    text = PLUGINS_DOC.read_text(encoding="utf-8")
    modules = [
        m.name for m in pkgutil.iter_modules(reef.testing.__path__) if not m.name.startswith("_")
    ]
    assert len(modules) >= 10
    missing = [name for name in modules if not re.search(rf"`reef\.testing\.{name}\b", text)]
    assert missing == [], f"modules of reef.testing that docs/plugins.md does not name: {missing}"
