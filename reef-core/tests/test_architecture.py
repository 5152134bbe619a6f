"""The floors of reef-core (``docs/architecture.md``): every import points down, and the bottom
floor, ``reef.core``, does no I/O.

An import counts wherever it is written (in a function too), except under ``TYPE_CHECKING``:
a type named in an annotation is no dependency at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"

#: Each package's floor, lowest first. A module imports from a lower floor or its own package.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("reef.errors", "reef.version"),
    ("reef.core",),
    ("reef.pipeline_context", "reef.hookspecs", "reef.containers"),
    ("reef.storage", "reef.components"),
    # A recipe names its stages by name; the task generator contract sits below the stage
    # that calls it.
    ("reef.recipe",),
    ("reef.record2sample",),
    ("reef.sample2job",),
    ("reef.plugins",),
    ("reef.train",),
    ("reef.server",),
    # Test helpers sit on top: they build whatever a test needs.
    ("reef.runtime", "reef.testing", "reef.scaffold"),
    ("reef.cli",),
)

#: What a module of ``reef.core`` may not import: files, processes, the network, the database,
#: the environment, logging, threads. Core holds values and rules; a floor above does the I/O.
IO_MODULES = frozenset(
    {
        "asyncio",
        "http",
        "httpx",
        "importlib",
        "io",
        "logging",
        "os",
        "pathlib",
        "shutil",
        "socket",
        "sqlalchemy",
        "sqlite3",
        "subprocess",
        "tempfile",
        "threading",
        "urllib",
    }
)


def _package(module: str) -> str:
    """The entry of :data:`FLOORS` that ``module`` belongs to (the longest that names it)."""
    named = [
        package
        for floor in FLOORS
        for package in floor
        if module == package or module.startswith(f"{package}.")
    ]
    assert named, f"{module} is on no floor: add its package to FLOORS"
    return max(named, key=len)


def _floor(package: str) -> int:
    return next(i for i, floor in enumerate(FLOORS) if package in floor)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SOURCE / "reef").rglob("*.py")):
        parts = path.relative_to(SOURCE).with_suffix("").parts
        if "migrations" in parts:
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _runtime_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import that runs (not under ``if TYPE_CHECKING:``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(child) for inner in node.body for child in ast.walk(inner))
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "reef":  # `from reef import hookspecs`: the submodules named
                found += [(node.lineno, f"reef.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


MODULES = _modules()


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m != "reef"))
def test_imports_point_down(module: str) -> None:
    own = _package(module)
    upward = [
        f"line {line}: {target} ({_package(target)})"
        for line, target in _runtime_imports(MODULES[module])
        if target.startswith("reef.")
        and _package(target) != own
        and _floor(_package(target)) >= _floor(own)
    ]
    assert upward == [], f"{module} ({own}) imports from its own floor or above"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("reef.core")))
def test_the_core_does_no_io(module: str) -> None:
    io = [
        f"line {line}: {target}"
        for line, target in _runtime_imports(MODULES[module])
        if target.split(".")[0] in IO_MODULES
    ]
    assert io == [], f"{module} imports I/O; it belongs on a floor above reef.core"


def test_the_public_api_module_imports_nothing_at_run_time_but_the_version() -> None:
    imports = [t for _, t in _runtime_imports(MODULES["reef"]) if t.startswith("reef")]
    assert imports == ["reef.version"]
