"""``reef new recipe NAME`` writes a package whose own tests pass out of the box.

The package is written into a temporary folder, built into a wheel by its own build backend and
installed into a throwaway folder (as ``pip install`` would put it), so Reef finds it through
its entry point; then its generated tests run there, and ``reef plugins`` and ``reef check``
see it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reef.cli import main


def run(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=False, env=env, cwd=cwd
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def test_the_new_package_installs_registers_and_passes_its_own_tests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", "recipe", "votes", "--directory", str(tmp_path)]) == 0
    package = tmp_path / "reef-recipe-votes"
    assert f"wrote {package}" in capsys.readouterr().out
    assert main(["new", "recipe", "votes", "--directory", str(tmp_path)]) == 1
    assert "exists: choose another name" in capsys.readouterr().err

    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp_path / "w", package)
    (wheel,) = (tmp_path / "w").glob("reef_recipe_votes-*.whl")
    site = tmp_path / "site"
    run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "-t", site, wheel)
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}

    tests = run(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", env=env,
        cwd=package,
    )  # fmt: skip
    # Three tests, the storage one on SQLite and, where REEF_TEST_DATABASE_URL names one, on
    # PostgreSQL too: all pass (run() checked the exit status), none is skipped for a bug.
    assert " passed" in tests
    assert "failed" not in tests
    listing = json.loads(run(sys.executable, "-m", "reef.cli", "plugins", "--json", env=env))
    mine = {(r["kind"], r["name"]) for r in listing["registered"]}
    assert {("recipe", "votes"), ("record2sample", "VotesSamples")} <= mine
    votes = next(r for r in listing["registered"] if r["name"] == "votes")
    assert votes["not_usable"] == []
    checked = run(
        sys.executable, "-m", "reef.cli", "check", "deployment.yaml", env=env, cwd=package
    )
    assert checked.strip() == "deployment.yaml: ok (votes)"


def test_a_bad_recipe_name_is_refused_saying_what_a_name_may_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", "recipe", "My-Recipe", "--directory", str(tmp_path)]) == 1
    assert "use lower-case letters, digits and '_'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
