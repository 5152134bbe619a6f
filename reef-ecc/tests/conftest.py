"""Fixtures of agent_ecc's tests: a store, a registry and the synthetic world on temp folders."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from agent_ecc import ContentStore, DirectoryRegistry
from agent_ecc.recompute.executor import Executor
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


def _load_fixture_script(file: str, name: str) -> ModuleType:
    # tests/ is not a package (--import-mode=importlib): load the fixture script by path.
    path = Path(__file__).parent / "fixtures" / file
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


fixture_script = _load_fixture_script("make_fixtures.py", "agent_ecc_test_fixtures")
_load_fixture_script("docker_standin.py", "agent_ecc_docker_standin")


@pytest.fixture(scope="session")
def swe_store(tmp_path_factory: pytest.TempPathFactory) -> ContentStore:
    return ContentStore(tmp_path_factory.mktemp("swe-store"))


@pytest.fixture(scope="session")
def swe(swe_store: ContentStore) -> Any:
    """The real calc task (a git snapshot, patches, eval scripts) in a session store."""
    return fixture_script.make_fixtures(swe_store)


@pytest.fixture(scope="session")
def executor(swe_store: ContentStore) -> Executor:
    return Executor(swe_store)


@pytest.fixture(scope="session")
def reference(swe: Any, executor: Executor) -> list[str]:
    """The hardened suite's reference set from gold runs (the flaky test left out)."""
    found, _ = fixture_script.gold_reference_set(swe, executor)
    return list(found)
