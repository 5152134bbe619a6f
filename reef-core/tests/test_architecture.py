"""The floors of reef-core (``docs/architecture.md``): every import points down, and the bottom
floor, ``reef.core``, does no I/O.

An import counts wherever it is written (in a function too), except under ``TYPE_CHECKING``:
a type named in an annotation is no dependency at run time.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[1] / "src"

#: Each package's floor, lowest first. A module imports from a lower floor or its own package.
FLOORS: tuple[tuple[str, ...], ...] = (
    ("reef.errors", "reef.version"),
    ("reef.core",),
    ("reef.pipeline_context", "reef.hookspecs", "reef.containers"),
    ("reef.storage", "reef.components"),
    # Engines answer calls with the weights components make, and publish what they store.
    ("reef.engines",),
    # Evaluations reach an artifact through an engine and keep their results in the stores.
    ("reef.evals",),
    # Trackers log each job, and the evaluations of the artifact it published.
    ("reef.trackers",),
    # The recipe base names its stages by name, so it sits below them.
    ("reef.recipe",),
    ("reef.record2sample",),
    ("reef.sample2job",),
    # The built-in recipes, each one package (recipe, stages, what they keep) as a recipe
    # distribution is: above the stage bases and the shared stages they build on.
    ("reef.recipe.grouped", "reef.recipe.generated_tasks"),
    ("reef.plugins",),
    # What a program that embeds Reef imports: the plugins and a deployment read with them.
    ("reef.embed",),
    ("reef.train",),
    ("reef.server",),
    # Test helpers sit on top: they build whatever a test needs.
    ("reef.runtime", "reef.testing"),
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


def test_the_public_api_module_imports_nothing_of_reef_at_run_time() -> None:
    """``reef/__init__.py`` imports only the lazy loader: each public name's module loads when
    the name is first used."""
    imports = [t for _, t in _runtime_imports(MODULES["reef"])]
    assert imports == ["lazy_loader"]


#: The contributors' map of reef-core's modules.
MAP = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
#: A package heading of the map: "`reef/core/`, values and rules:".
_PACKAGE_HEADING = re.compile(r"^`reef/((?:[\w]+/)*)`")
#: A path a line of the map names: a module or a folder, in backticks.
_NAMED_PATH = re.compile(r"`((?:[\w.-]+/)*(?:[\w]+\.py|[\w]+/))`")


def _map_names() -> set[Path]:
    """Every module and folder of ``reef/`` the map names, as paths under ``SOURCE``."""
    text = MAP.read_text(encoding="utf-8")
    section = text[text.index("## reef-core, module by module") : text.index("## Where a change")]
    named: set[Path] = set()
    package = ""
    for line in section.splitlines():
        heading = _PACKAGE_HEADING.match(line)
        if heading:
            package = heading.group(1)
            continue
        for token in _NAMED_PATH.findall(line):
            if token.startswith("reef-core/"):
                continue  # a path of the workspace beside the package, not a module of it
            # A path is named under its section's package, or from ``reef/`` itself.
            here = SOURCE / "reef" / package / token
            named.add(here if here.exists() else SOURCE / "reef" / token)
    return named


def test_the_module_map_names_every_module_and_nothing_that_is_gone() -> None:
    """docs/architecture.md maps each module of reef-core (migrations are one folder), and each
    path it names exists: a module added, moved or deleted without its line fails here."""
    named = _map_names()
    gone = sorted(str(p.relative_to(SOURCE)) for p in named if not p.exists())
    assert gone == [], f"docs/architecture.md names what is not in reef-core/src: {gone}"
    migrations = SOURCE / "reef" / "storage" / "migrations"
    unnamed = sorted(
        str(path.relative_to(SOURCE))
        for path in (SOURCE / "reef").rglob("*.py")
        if path not in named and not path.is_relative_to(migrations)
    )
    assert unnamed == [], f"docs/architecture.md does not map: {unnamed}"
    assert migrations in named, "docs/architecture.md does not name storage/migrations/"
