"""Fresh virtual environments with the workspace's distributions installed from built wheels:
what the isolation tests (``tests/test_isolation_*.py``) install into and run in.

The wheels are built once per run: under pytest-xdist every worker asks for them, the first
builds them under a file lock in the run's shared temp folder, the others wait and take them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import venv
from pathlib import Path

import pytest
from filelock import FileLock

ROOT = Path(__file__).resolve().parents[1]
RECIPES = ["reef-recipes-sft", "reef-recipes-distill", "reef-recipes-tttd", "reef-recipes-spade"]
#: What a distribution's own suite needs beside its declared dependencies.
TEST_TOOLS = ("pytest", "hypothesis")


def run(*args: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def run_tests(
    python: Path, tests: Path, cwd: Path, *, marks: str | None = None, workers: int = 0
) -> None:
    """Run the distribution's tests folder ``tests`` with the venv's ``python``, over
    ``workers`` pytest-xdist workers when it is not 0 (the venv then needs pytest-xdist)."""
    selection = ["-m", marks] if marks else []
    parallel = ["-n", str(workers), "--dist", "loadfile"] if workers else []
    run(python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selection, *parallel, tests,
        cwd=cwd)  # fmt: skip


def built_wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder of every distribution's wheel, built once for the whole run."""
    shared = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        shared = shared.parent  # the workers' temp folders sit side by side in the run's
    out = shared / "wheels"
    with FileLock(str(shared / "wheels.lock")):
        if not (out / "done").is_file():
            out.mkdir(exist_ok=True)
            for dist in ["reef-core", *RECIPES, "reef-ecc"]:
                run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out, ROOT / dist)
            (out / "done").write_text("")
    return out


def with_test_extra(dist: str) -> str:
    """``dist[test]`` when the distribution declares test-only dependencies as a ``test`` extra."""
    project = tomllib.loads((ROOT / dist / "pyproject.toml").read_text(encoding="utf-8"))
    extras = project["project"].get("optional-dependencies", {})
    return f"{dist}[test]" if "test" in extras else dist


#: Where a distribution's requirements admit PyTorch, the build the workspace's setup installs:
#: its CPU wheel lies on this machine's disk, while the newest release is GBs of CUDA build.
TORCH = "torch==2.13.0"


def fresh_venv(path: Path, wheels: Path, *requirements: str) -> Path:
    venv.create(path, with_pip=True)
    python = path / "bin" / "python"
    constraints = path / "constraints.txt"
    constraints.write_text(TORCH + "\n", encoding="utf-8")
    run(python, "-m", "pip", "install", "-q", "--find-links", wheels, "-c", constraints,
        *requirements)  # fmt: skip
    return python


def plugin_names(python: Path, cwd: Path) -> set[str]:
    listing = json.loads(run(python, "-m", "reef.cli", "plugins", "--json", cwd=cwd))
    return {row["name"] for row in listing["registered"]}
