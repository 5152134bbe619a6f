"""``import reef`` is the public API: curated, documented, typed, every name resolving, cheap."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import reef

# What a plugin's entry-point module or `reef --version` must not pay for by importing `reef`.
HEAVY = ("sqlalchemy", "alembic", "jsonschema", "cattrs", "attrs", "pluggy", "yaml", "starlette")


def _modules_after(code: str) -> set[str]:
    """The modules loaded by a fresh interpreter that runs ``code``."""
    done = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport json, sys; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_reef_loads_no_dependency_and_no_stage() -> None:
    loaded = _modules_after("import reef")
    assert sorted(m for m in loaded if m.split(".")[0] in HEAVY) == []
    assert sorted(m for m in loaded if m.startswith("reef.")) == []


def test_the_whole_api_stays_clear_of_storage_the_service_and_torch() -> None:
    """Stages never touch storage: resolving every public name loads no database, HTTP or
    training library."""
    loaded = _modules_after("import reef\nfor name in reef.__all__: getattr(reef, name)")
    for heavy in ("sqlalchemy", "alembic", "starlette", "uvicorn", "httpx", "torch"):
        assert heavy not in loaded
    assert not any(m.startswith(("reef.storage", "reef.server", "reef.train")) for m in loaded)


#: The one list of the public names: what type checkers read, and what loads them.
STUB = Path(reef.__file__).with_suffix(".pyi")


def _stub_names() -> list[str]:
    """Each name the stub imports, as it is written (``from .x import Name as Name``)."""
    names = []
    for node in ast.parse(STUB.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                # Re-exported only when aliased to itself (what a type checker exports).
                assert alias.asname == alias.name, f"write `{alias.name} as {alias.name}`"
                names.append(alias.name)
    return names


def test_every_exported_name_resolves_and_is_listed() -> None:
    names = _stub_names()
    assert len(names) == len(set(names))
    assert sorted(reef.__all__) == sorted(names)
    for name in names:
        value = getattr(reef, name)
        assert value is not None, name
        if isinstance(value, type):
            assert value.__module__.startswith("reef."), name
    assert set(reef.__all__) <= set(dir(reef))


def test_a_name_the_api_does_not_have_is_a_type_error(tmp_path: Path) -> None:
    """mypy --strict refuses a wrong name (``reef`` has no catch-all ``__getattr__`` for type
    checkers: they read the stub) and takes every real one. The modules behind the names are
    not analysed (``follow_imports = skip``): what is checked is the list itself."""
    api = pytest.importorskip("mypy.api")
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\nstrict = True\n\n[mypy-reef.*]\nfollow_imports = skip\n")
    wrong = tmp_path / "wrong.py"
    wrong.write_text("from reef import NoSuchThing\n", encoding="utf-8")
    every = tmp_path / "every.py"
    every.write_text(f"from reef import {', '.join(sorted(_stub_names()))}\n", encoding="utf-8")
    out, err, status = api.run(
        ["--config-file", str(config), "--no-incremental", str(wrong), str(every)]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1, out + err
    assert len(errors) == 1, out
    assert 'Module "reef" has no attribute "NoSuchThing"' in errors[0], out
    assert errors[0].startswith(str(wrong)), out
