"""``scripts/build`` builds an sdist and a wheel of every distribution, checks them with twine,
and installs each wheel alone in a fresh virtual environment and imports it there; it refuses
to empty a folder that holds anything but its own output."""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def distributions() -> dict[str, str]:
    """Each distribution of the workspace: its name and version."""
    found = {}
    for pyproject in sorted(ROOT.glob("*/pyproject.toml")):
        settings = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        version_file = pyproject.parent / settings["tool"]["hatch"]["version"]["path"]
        version = version_file.read_text(encoding="utf-8").split('"')[1]
        found[settings["project"]["name"]] = version
    return found


def build(out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / "build"), "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The folder scripts/build filled, and what it printed."""
    out = tmp_path_factory.mktemp("dist")
    done = build(out)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out, done.stdout


@pytest.mark.slow
def test_every_distribution_has_a_checked_wheel_and_sdist_installed_alone(
    built: tuple[Path, str],
) -> None:
    out, said = built
    expected = set()
    for name, version in distributions().items():
        stem = f"{name.replace('-', '_')}-{version}"
        expected |= {f"{stem}-py3-none-any.whl", f"{stem}.tar.gz"}
    assert {path.name for path in out.iterdir()} == expected
    assert f"twine check --strict: {2 * len(distributions())} files" in said
    installed = [line for line in said.splitlines() if line.startswith("install [")]
    assert len(installed) == len(distributions())
    assert "alone in a fresh venv, import reef\n" in said
    assert "alone in a fresh venv, import agent_ecc\n" in said


def test_a_folder_holding_other_files_is_refused_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    done = build(tmp_path)
    assert done.returncode == 2
    assert f"build: {tmp_path} holds other files than wheels and sdists" in done.stderr
    assert [path.name for path in tmp_path.iterdir()] == ["notes.txt"]
