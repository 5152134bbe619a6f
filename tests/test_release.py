"""``scripts/release``: a dry run changes nothing and shows what a release would; a release
writes the versions, dates the changelogs, rewrites the ranges of what depends on a new minor,
builds, commits and tags, and pushes nothing; what it refuses, it refuses before writing, with
every problem named.

Each test runs the script in a git repository of its own holding a copy of the files a release
reads (every pyproject.toml, version file and changelog of the workspace), with a stand-in
``scripts/build`` that records its call, and a bare repository as its ``origin``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATE = "2026-12-01"
#: A build that records its arguments instead of building (scripts/build is tested by its own
#: test, tests/test_scripts_build.py), and fails when BUILD_FAILS says so.
STAND_IN_BUILD = (
    '#!/usr/bin/env bash\necho "$*" >>"$(dirname "$0")/../build.log"\nexit "${BUILD_FAILS:-0}"\n'
)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout


def copy_of_the_workspace(target: Path) -> None:
    """Every file a release reads or writes, at the same paths."""
    files = [ROOT / "scripts" / "release", ROOT / "tests" / "example_recipe" / "pyproject.toml"]
    for pyproject in ROOT.glob("*/pyproject.toml"):
        settings = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        version_file = pyproject.parent / settings["tool"]["hatch"]["version"]["path"]
        files += [pyproject, pyproject.parent / "CHANGELOG.md", version_file]
    for source in files:
        copied = target / source.relative_to(ROOT)
        copied.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, copied)
    build = target / "scripts" / "build"
    build.write_text(STAND_IN_BUILD)
    build.chmod(0o755)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The copy, committed, with a bare repository as origin that holds that commit."""
    repo = tmp_path / "repo"
    copy_of_the_workspace(repo)
    (repo / ".gitignore").write_text("build.log\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "release@test")
    git(repo, "config", "user.name", "release test")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "the workspace")
    git(tmp_path, "init", "-q", "--bare", "origin.git")
    git(repo, "remote", "add", "origin", str(tmp_path / "origin.git"))
    git(repo, "push", "-q", "origin", "main")
    return repo


#: A new minor of reef-core, and of everything that depends on it by a range.
NEW_MINOR = [
    "reef-core=0.2.0",
    *(f"reef-recipes-{name}=0.2.0" for name in ["sft", "distill", "tttd", "spade"]),
    "reef-ecc=0.2.0",
]


def one_unreleased_section_in_reef_ecc(repo: Path) -> None:
    """reef-ecc's changelog holds two unreleased sections (0.2.0 and 0.1.0, never released):
    mark the older one as the release script asks, and commit."""
    changelog = repo / "reef-ecc" / "CHANGELOG.md"
    text = changelog.read_text(encoding="utf-8")
    changelog.write_text(text.replace("## 0.1.0 (unreleased)", "## 0.1.0 (not released)"))
    git(repo, "commit", "-q", "-am", "reef-ecc: 0.1.0 was never released")


def release(
    repo: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(repo / "scripts" / "release"), "--date", DATE, *args],
        cwd=repo,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def state(repo: Path) -> tuple[str, str, str]:
    """HEAD, the tags and the working tree's changes."""
    return git(repo, "rev-parse", "HEAD"), git(repo, "tag"), git(repo, "status", "--porcelain")


def remote(repo: Path) -> tuple[str, str]:
    """What origin holds: its branches' heads and its tags."""
    return git(repo, "ls-remote", "--heads", "origin"), git(repo, "ls-remote", "--tags", "origin")


def test_a_dry_run_shows_the_release_and_changes_nothing(workspace: Path) -> None:
    one_unreleased_section_in_reef_ecc(workspace)
    before, on_origin = state(workspace), remote(workspace)
    done = release(workspace, "--dry-run", *NEW_MINOR)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert '+__version__ = "0.2.0"' in out
    assert f"+## 0.2.0 ({DATE})" in out
    assert '-dependencies = ["reef-core>=0.1,<0.2"]' in out
    assert '+dependencies = ["reef-core>=0.2,<0.3"]' in out
    assert "would commit: Release reef-core 0.2.0, reef-recipes-sft 0.2.0, " in out
    assert "would tag: reef-core-v0.2.0 reef-recipes-sft-v0.2.0 " in out
    assert "git push origin HEAD reef-core-v0.2.0 reef-recipes-sft-v0.2.0 " in out
    assert state(workspace) == before
    assert remote(workspace) == on_origin
    assert not (workspace / "build.log").exists()


def test_a_release_writes_builds_commits_and_tags_and_pushes_nothing(workspace: Path) -> None:
    on_origin = remote(workspace)
    done = release(workspace, "reef-core=0.1.0", "reef-recipes-sft=0.1.0")
    assert done.returncode == 0, done.stderr
    assert "nothing was pushed or uploaded" in done.stdout
    assert (workspace / "build.log").read_text() == "--out dist\n"
    assert git(workspace, "log", "-1", "--format=%s") == (
        "Release reef-core 0.1.0, reef-recipes-sft 0.1.0\n"
    )
    assert git(workspace, "tag").split() == ["reef-core-v0.1.0", "reef-recipes-sft-v0.1.0"]
    assert git(workspace, "cat-file", "-t", "reef-core-v0.1.0").strip() == "tag"  # annotated
    assert git(workspace, "status", "--porcelain") == ""
    changelog = (workspace / "reef-core" / "CHANGELOG.md").read_text()
    assert f"\n## 0.1.0 ({DATE})\n" in changelog
    assert "(unreleased)" not in changelog
    assert remote(workspace) == on_origin

    again = release(workspace, "reef-core=0.1.0")
    assert again.returncode == 1
    assert "the tag reef-core-v0.1.0 exists" in again.stderr
    assert "0.1.0 is not above 0.1.0" in again.stderr


def test_a_failed_build_puts_every_file_back_and_commits_nothing(workspace: Path) -> None:
    before = state(workspace)
    done = release(workspace, "reef-core=0.1.0", env={"BUILD_FAILS": "1"})
    assert done.returncode == 1
    assert "scripts/build failed: every file is as it was" in done.stderr
    assert (workspace / "build.log").read_text() == "--out dist\n"  # it did run
    assert state(workspace) == before


def test_a_new_minor_rewrites_the_ranges_of_what_is_released_with_it(workspace: Path) -> None:
    one_unreleased_section_in_reef_ecc(workspace)
    done = release(workspace, *NEW_MINOR)
    assert done.returncode == 0, done.stderr
    assert (workspace / "reef-core" / "src" / "reef" / "version.py").read_text() == (
        '__version__ = "0.2.0"\n'
    )
    spade = (workspace / "reef-recipes-spade" / "pyproject.toml").read_text()
    assert 'dependencies = ["reef-core[server]>=0.2,<0.3", "httpx>=0.27"]' in spade
    tttd = (workspace / "reef-recipes-tttd" / "pyproject.toml").read_text()
    assert 'test = ["reef-core[postgres]>=0.2,<0.3"]' in tttd
    ecc = (workspace / "reef-ecc" / "pyproject.toml").read_text()
    assert 'reef = ["reef-core>=0.2,<0.3"]' in ecc
    # The guide's example is no distribution: it follows the core.
    example = (workspace / "tests" / "example_recipe" / "pyproject.toml").read_text()
    assert 'dependencies = ["reef-core>=0.2,<0.3"]' in example


def test_a_release_that_would_break_a_dependent_is_refused_before_anything_is_written(
    workspace: Path,
) -> None:
    before = state(workspace)
    done = release(workspace, "reef-core=0.2.0")
    assert done.returncode == 1
    assert done.stderr.startswith("release: refused, ")
    for name in ["reef-recipes-sft", "reef-recipes-distill", "reef-recipes-tttd"]:
        assert (
            f'{name}/pyproject.toml requires "reef-core>=0.1,<0.2", which 0.2.0 is outside:'
            f" release {name} in the same run ({name}=VERSION)"
        ) in done.stderr
    assert "reef-ecc/pyproject.toml requires" in done.stderr  # its `reef` extra
    assert state(workspace) == before
    assert not (workspace / "build.log").exists()


def test_refusals_name_each_problem(workspace: Path) -> None:
    (workspace / "reef-recipes-sft" / "CHANGELOG.md").write_text("# Changelog\n\n## 0.1.0\n")
    git(workspace, "commit", "-q", "-am", "a changelog without an unreleased section")
    done = release(workspace, "reef-recipes-sft=0.1.0", "reef-ecc=0.1.0")
    assert done.returncode == 1
    assert (
        "reef-recipes-sft/CHANGELOG.md: its first section is not '## <version> (unreleased)'"
    ) in done.stderr
    assert "reef-ecc: 0.1.0 is below the version it has, 0.2.0" in done.stderr
    assert "the sections of 0.1.0 are marked unreleased too" in done.stderr

    (workspace / "reef-core" / "README.md").write_text("a change\n")
    git(workspace, "add", "reef-core/README.md")
    dirty = release(workspace, "reef-core=0.1.0")
    assert "the working tree has uncommitted changes" in dirty.stderr

    for bad, said in [
        ("reef-core=0.2", "give the version as X.Y.Z"),
        ("reef-nothing=0.1.0", "'reef-nothing' is not a distribution of the workspace"),
    ]:
        refused = release(workspace, bad)
        assert refused.returncode == 2
        assert said in refused.stderr
