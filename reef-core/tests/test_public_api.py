"""``import reef`` is the public API: curated, documented, every name resolving, and cheap."""

from __future__ import annotations

import json
import subprocess
import sys

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
    assert sorted(m for m in loaded if m.startswith("reef.")) == ["reef.version"]


def test_the_whole_api_stays_clear_of_storage_the_service_and_torch() -> None:
    """Stages never touch storage: resolving every public name loads no database, HTTP or
    training library."""
    loaded = _modules_after("import reef\nfor name in reef.__all__: getattr(reef, name)")
    for heavy in ("sqlalchemy", "alembic", "starlette", "uvicorn", "httpx", "torch"):
        assert heavy not in loaded
    assert not any(m.startswith(("reef.storage", "reef.server", "reef.train")) for m in loaded)


def test_every_exported_name_resolves_and_is_listed() -> None:
    assert len(reef.__all__) == len(set(reef.__all__))
    assert set(reef.__all__) == {"__version__", *reef._HOMES}
    for name in reef.__all__:
        value = getattr(reef, name)
        assert value is not None, name
        if name in reef._HOMES and isinstance(value, type):
            assert value.__module__.startswith("reef."), name
    assert set(reef.__all__) <= set(dir(reef))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        reef.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
