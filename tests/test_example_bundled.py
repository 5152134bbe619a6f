"""The bundled example runs from a fresh store and shows the linking it is built to show."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "quickstart"


def test_data_file_is_what_the_script_makes(tmp_path: Path) -> None:
    out = tmp_path / "records.jsonl"
    subprocess.run([sys.executable, EXAMPLE / "make_data.py", out], check=True, capture_output=True)
    assert out.read_text() == (EXAMPLE / "records.jsonl").read_text()


def test_summary_links_retries_branches_and_tool_changes(tmp_path: Path) -> None:
    """rule: P-SET-2 — the retry is a sibling, the branch shares its root, new tools start over."""
    result = subprocess.run(
        [sys.executable, EXAMPLE / "summarise.py", "--dir", tmp_path],
        check=True,
        capture_output=True,
        text=True,
    )
    out = result.stdout
    assert "scenario travel (recipe sft)" in out
    assert "calls: 9 (1 aborted by the engine)" in out
    # The first attempt of the retry is a trajectory of its own; the retry continues.
    assert "    inf-0004  reports: -" in out
    assert "    inf-0005 -> inf-0006  reports: rep-0002" in out
    # One report scores both branches of a conversation.
    assert "    inf-0007 -> inf-0008  reports: rep-0003" in out
    assert "    inf-0007 -> inf-0009  reports: rep-0003" in out
    # Changing tools half-way starts a new trajectory.
    assert "    inf-0010  reports: -" in out
    assert "    inf-0011  reports: -" in out
    atif = json.loads(out[out.index("{") :])
    assert atif["schema_version"] == "ATIF-v1.8"
    assert [s["source"] for s in atif["steps"]][:2] == ["system", "user"]
    assert (tmp_path / "reef.db").exists()


def test_without_a_folder_the_store_lives_in_a_temporary_folder_that_is_removed(
    tmp_path: Path,
) -> None:
    """What ``scripts/example`` runs leaves nothing in the temporary folder."""
    result = subprocess.run(
        [sys.executable, EXAMPLE / "summarise.py"],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    (store,) = [line for line in result.stdout.splitlines() if line.startswith("store: ")]
    assert store.startswith(f"store: sqlite:///{tmp_path}/reef-example-")
    assert list(tmp_path.iterdir()) == []
