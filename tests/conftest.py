"""Reef's storage fixtures (storage_url, storage_database, postgres_url) for these tests: a
suite opts into them, as a recipe's own suite does."""

from __future__ import annotations

from pathlib import Path

import pytest
from fresh_venvs import built_wheels

pytest_plugins = ["reef.testing"]


@pytest.fixture(scope="session")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every distribution's wheel, built once for the run (``fresh_venvs.built_wheels``)."""
    return built_wheels(tmp_path_factory)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` (``scripts/test``): a module's tests go to one worker together,
    so its module fixtures (a served console, a browser) are built once, except a module that
    sets ``SPREAD_OVER_WORKERS = True``: its tests are long and independent (each installs a
    fresh environment or trains through its own ``reef serve``), so each goes to whichever
    worker is free. Kept in one file, they made one worker the run's long pole."""
    for item in items:
        module = getattr(item, "module", None)
        if module is not None and not getattr(module, "SPREAD_OVER_WORKERS", False):
            item.add_marker(pytest.mark.xdist_group(module.__name__))
