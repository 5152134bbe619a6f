"""``reef new recipe NAME`` writes a package whose own tests pass out of the box, laid out as
Reef's layout rule wants it.

The package is written into a temporary folder, built into a wheel by its own build backend and
installed into a throwaway folder (as ``pip install`` would put it), so Reef finds it through
its entry point; then its generated tests run there, ``reef plugins`` and ``reef check`` see it,
and Reef's own layout test passes with it installed. That it installs and passes with exactly
the dependencies it declares, in a fresh environment, is
``tests/test_isolation_new_recipe.py``'s to show (it builds the wheels that takes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reef.cli import main

ROOT = Path(__file__).resolve().parents[1]
#: Reef's test of the layout rule, which looks at every installed recipe.
LAYOUT_TEST = (
    f"{ROOT}/reef-core/tests/test_pipeline_rules.py"
    "::test_installed_recipes_keep_their_own_stages_in_their_processor_module"
)


def run(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, check=False, env=env, cwd=cwd
    )
    assert done.returncode == 0, f"{args}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package ``reef new recipe votes`` writes."""
    folder = tmp_path_factory.mktemp("new")
    assert main(["new", "recipe", "votes", "--directory", str(folder)]) == 0
    return folder / "reef-recipe-votes"


@pytest.fixture(scope="module")
def environ(package: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """This process's environment with the package's wheel installed on the import path."""
    out = tmp_path_factory.mktemp("votes")
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", out / "w", package)
    (wheel,) = (out / "w").glob("reef_recipe_votes-*.whl")
    site = out / "site"
    run(sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "-t", site, wheel)
    paths = [str(site), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def test_new_writes_the_layout_and_says_how_to_install_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["new", "recipe", "votes", "--directory", str(tmp_path)]) == 0
    root = tmp_path / "reef-recipe-votes"
    said = capsys.readouterr().out
    assert said.startswith(f"wrote {root}: cd {root} && pip install -e '.[test]' && pytest")
    assert "docs/installing.md" in said
    written = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert written == [
        "README.md",
        "deployment.yaml",
        "pyproject.toml",
        "src/reef_votes/__init__.py",
        "src/reef_votes/plugin.py",
        "src/reef_votes/processor.py",
        "src/reef_votes/py.typed",
        "src/reef_votes/recipe.py",
        "tests/conftest.py",
        "tests/test_votes.py",
    ]
    assert main(["new", "recipe", "votes", "--directory", str(tmp_path)]) == 1
    assert "exists: choose another name" in capsys.readouterr().err


def test_the_readme_links_the_guide_of_this_checkout(package: Path) -> None:
    readme = (package / "README.md").read_text(encoding="utf-8")
    (target,) = re.findall(r"\[Reef's recipe-authoring guide\]\(([^)]+)\)", readme)
    assert Path(target) == ROOT / "docs" / "recipe-authoring.md"
    assert "src/reef_votes/processor.py" in readme


def test_the_installed_package_registers_checks_and_passes_its_own_tests(
    package: Path, environ: dict[str, str]
) -> None:
    tests = run(
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", env=environ,
        cwd=package,
    )  # fmt: skip
    # Three tests, the storage one on SQLite and, where REEF_TEST_DATABASE_URL names one, on
    # PostgreSQL too: all pass (run() checked the exit status), none is skipped for a bug.
    assert " passed" in tests
    assert "failed" not in tests
    listing = json.loads(run(sys.executable, "-m", "reef.cli", "plugins", "--json", env=environ))
    mine = {(r["kind"], r["name"]): r["class"] for r in listing["registered"]}
    assert mine[("recipe", "votes")] == "reef_votes.recipe:VotesRecipe"
    assert mine[("record2sample", "VotesSamples")] == "reef_votes.processor:VotesSamples"
    votes = next(r for r in listing["registered"] if r["name"] == "votes")
    assert votes["not_usable"] == []
    checked = run(
        sys.executable, "-m", "reef.cli", "check", "deployment.yaml", env=environ, cwd=package
    )
    assert checked.strip() == "deployment.yaml: ok (votes)"


def test_reefs_layout_rule_holds_with_the_package_installed(environ: dict[str, str]) -> None:
    """rule: P-LAYOUT-4 Reef's own test of the layout, which checks every installed recipe,
    passes with the scaffolded package installed: its stage lives in ``reef_votes.processor``
    and ``reef_votes.recipe`` names it (with the stage in a ``samples`` module, as the scaffold
    wrote it before, that test fails)."""
    run(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", LAYOUT_TEST, env=environ)


def test_a_bad_recipe_name_is_refused_saying_what_a_name_may_be(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(["new", "recipe", "My-Recipe", "--directory", str(tmp_path)])
    assert done.value.code == 2
    assert "use lower-case letters, digits and '_'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
