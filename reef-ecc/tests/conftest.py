"""Fixtures of agent_ecc's tests: a store, a registry and the synthetic world on temp folders."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent_ecc import ContentStore, DirectoryRegistry
from agent_ecc.synthetic import SyntheticWorld


@pytest.fixture
def store(tmp_path: Path) -> ContentStore:
    return ContentStore(tmp_path / "store")


@pytest.fixture
def world(store: ContentStore) -> SyntheticWorld:
    return SyntheticWorld(store, ("t1", "t2"))


@pytest.fixture
def registry(tmp_path: Path, world: SyntheticWorld) -> DirectoryRegistry:
    registry = DirectoryRegistry(tmp_path / "registry")
    registry.publish_grader(world.version(0), source="startup")
    registry.publish_world(world.world(), source="startup")
    return registry
