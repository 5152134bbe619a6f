"""``scripts/setup`` installs only when what it installs changed, and ``scripts/example`` does
not reinstall: both run here against a copy of the files setup reads, with a stand-in
``.venv/bin/python`` that records how it is called instead of installing anything."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: A Python that installs nothing: it writes its arguments to a log and succeeds.
STAND_IN = '#!/usr/bin/env bash\necho "$*" >>"$(dirname "$0")/../calls.log"\n'


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The files setup hashes, its scripts, and a .venv whose python is the stand-in (with the
    marker of a failed apt install, so setup never calls apt)."""
    for source in [
        ROOT / "scripts" / "setup",
        ROOT / "scripts" / "example",
        ROOT / "requirements-dev.txt",
        ROOT / "pyproject.toml",
        *ROOT.glob("*/pyproject.toml"),
    ]:
        target = tmp_path / source.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STAND_IN)
    python.chmod(0o755)
    (tmp_path / ".venv" / "reef-setup.apt-failed").touch()
    return tmp_path


def run(workspace: Path, script: str) -> list[str]:
    """Runs ``scripts/<script>`` and returns the stand-in python's calls during it."""
    log = workspace / ".venv" / "calls.log"
    log.unlink(missing_ok=True)
    done = subprocess.run(
        ["bash", str(workspace / "scripts" / script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return log.read_text().splitlines() if log.exists() else []


def installs(calls: list[str]) -> list[str]:
    return [call for call in calls if call.startswith("-m pip install")]


def test_setup_installs_once_and_again_only_when_a_pyproject_changes(workspace: Path) -> None:
    first = installs(run(workspace, "setup"))
    assert any("-e reef-core[" in call for call in first), first
    assert (workspace / ".venv" / "reef-setup.stamp").is_file()

    again = run(workspace, "setup")
    assert installs(again) == []
    assert again == ["-c import reef"]  # the one check that the install is still there

    example = run(workspace, "example")
    assert installs(example) == []
    assert example[-1] == "examples/quickstart/summarise.py"

    with (workspace / "reef-core" / "pyproject.toml").open("a") as pyproject:
        pyproject.write("# a dependency changed\n")
    assert installs(run(workspace, "setup")) != []


#: A Python whose pip says what it collects, as pip does, and installs nothing; "import torch"
#: fails, as in a fresh .venv.
CHATTY_STAND_IN = """#!/usr/bin/env bash
echo "$*" >>"$(dirname "$0")/../calls.log"
case "$*" in
  "-c import torch") exit 1 ;;
  "-m pip install --progress-bar off"*)
    echo "Looking in links: /somewhere"
    echo "Collecting attrs>=24.2 (from reef-core)"
    echo "  Using cached attrs-25.1.0-py3-none-any.whl"
    echo "Collecting pluggy<2,>=1.5"
    echo "Installing collected packages: attrs, pluggy"
    echo "Successfully installed attrs-25.1.0 pluggy-1.6.0" ;;
esac
"""


def test_setup_says_what_it_installs_and_how_far_it_is(workspace: Path) -> None:
    """The first setup takes minutes: each step is announced as it starts, with the seconds
    so far, and each package pip collects is counted; a setup with nothing to do is quiet."""
    python = workspace / ".venv" / "bin" / "python"
    python.write_text(CHATTY_STAND_IN)
    script = workspace / "scripts" / "setup"
    done = subprocess.run(["bash", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    steps = [line.split("]: ", 1)[1] for line in lines if line.startswith("setup [")]
    assert steps == [
        "step 1 of 3: upgrading pip",
        "step 2 of 3: installing torch==2.13.0, the CPU build (about a minute)",
        "step 3 of 3: installing the workspace's distributions (editable, with their extras)"
        " and the development tools: minutes the first time (transformers, swebench,"
        " datasets, ...)",
        "compiling the installed packages to bytecode, on every core",
        "the workspace is installed in .venv",
    ]
    assert all(re.match(r"setup \[\d+ s\]: ", line) for line in lines if "step" in line)
    # torch's install and the workspace's each count what pip collected.
    assert lines.count("  collected 1: attrs>=24.2") == 2
    assert lines.count("  collected 2: pluggy<2,>=1.5") == 2
    assert lines.count("  installing what was collected") == 2
    assert "Using cached" not in done.stdout

    python.write_text(CHATTY_STAND_IN.replace('  "-c import torch") exit 1 ;;\n', ""))
    again = subprocess.run(["bash", script], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stderr
    assert again.stdout == ""
