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
    """The files marked ``slow`` (fresh environments, wheel builds) run first: the test script
    spreads whole files over pytest-xdist workers in collection order, and a long file that
    starts last keeps one worker busy after the others are done, with a core idle."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
