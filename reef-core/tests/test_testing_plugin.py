"""The storage fixtures reach a test suite only when it asks for them: reef-core registers no
``pytest11`` plugin, so installing it adds nothing to other projects' pytest runs, and a suite
opts in with ``pytest_plugins = ["reef.testing"]`` (or ``-p reef.testing``)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest


def test_reef_core_registers_no_pytest_plugin_for_every_run() -> None:
    registered = {ep.value for ep in entry_points(group="pytest11")}
    assert not any(value.split(".")[0] == "reef" for value in registered), registered


def test_a_suite_that_opts_in_gets_the_fixtures(storage_url: str) -> None:
    # this suite's conftest.py says pytest_plugins = ["reef.testing"]
    assert storage_url.startswith(("sqlite:", "postgresql"))


def _run_suite(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (folder / "test_uses_storage.py").write_text(
        "def test_database(storage_database):\n    assert storage_database is not None\n"
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, str(folder)]
    env = dict(os.environ)
    if importlib.util.find_spec("psycopg") is None:
        # reef-core installed without its postgres extra: the suite cannot reach the database.
        env.pop("REEF_TEST_DATABASE_URL", None)
    return subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, check=False, timeout=120
    )


@pytest.mark.parametrize("opt_in", ["none", "command line", "conftest"])
def test_another_suite_gets_the_fixtures_only_when_it_asks(tmp_path: Path, opt_in: str) -> None:
    """A suite of someone else's project, in an environment where reef-core is installed: its
    tests see no Reef fixture unless it opts in."""
    args: list[str] = ["-p", "reef.testing"] if opt_in == "command line" else []
    if opt_in == "conftest":
        (tmp_path / "conftest.py").write_text('pytest_plugins = ["reef.testing"]\n')
    done = _run_suite(tmp_path, *args)
    if opt_in == "none":
        assert done.returncode == 1
        assert "fixture 'storage_database' not found" in done.stdout
    else:
        assert done.returncode == 0, done.stdout + done.stderr
