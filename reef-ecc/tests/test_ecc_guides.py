"""The runnable guides run end to end, as a user runs them: the quickstart
(docs/ecc/quickstart.md, ``examples/quickstart/run.py``, and the page's own Python blocks) on the
shipped SWE-bench run folder, and the plain GRPO loop of docs/ecc/integrating.md
(``examples/grpo/run.py``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
EXAMPLE = EXAMPLES / "quickstart"
REPOSITORY = Path(__file__).resolve().parents[2]
QUICKSTART_PAGE = REPOSITORY / "docs" / "ecc" / "quickstart.md"
_PYTHON_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def _run(script: Path, *args: str | Path) -> tuple[dict[str, Any], str]:
    done = subprocess.run(
        [sys.executable, str(script), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout), done.stderr


def test_a_plain_grpo_loop_trains_the_sealed_rewards_through_a_grader_fix(tmp_path: Path) -> None:
    """rule: E-REG-2, E-REG-3, E-GRADE-1, E-GRADE-6, E-SEAL-2, E-SEAL-4, E-AUDIT-1, E-AUDIT-2,
    E-AUDIT-3: groups rolled out under g0 and sealed after the fix train g1's rewards (their
    logs re-parsed); every consumed reward is its seal's; every seal read the epoch in force."""
    summary, _ = _run(EXAMPLES / "grpo" / "run.py", tmp_path)
    steps = {s["step"]: s for s in summary["steps"]}
    assert [steps[s]["epoch"] for s in sorted(steps)] == [0, 0, 1, 1, 1, 1, 1]
    assert steps[3]["decisions"] == {"reparse": 8}  # rolled out under g0, sealed under g1
    assert steps[3]["changed"] > 0
    assert all(steps[s]["decisions"] == {"reuse": 8} for s in (1, 2, 4, 5, 6, 7))
    assert summary["manifest_ok"] is True
    assert summary["epochs_ok"] is True
    assert steps[7]["p_correct"] > steps[1]["p_correct"]


def test_quickstart_from_swebench_logs_to_an_audit(tmp_path: Path) -> None:
    """rule: E-REPLAY-5, E-REG-1, E-REG-2, E-SEAL-7, E-SEAL-12, E-AUDIT-3, E-AUDIT-4: checks
    from SWE-bench rows, records from the harness's logs graded as its report.json says, a
    grader fix re-parsed from stored logs (nothing executed), the infrastructure failure counted,
    and both audits clean."""
    pytest.importorskip(
        "swebench.harness.log_parsers",
        reason="the quickstart grades a Django instance with swebench's parser: reef-ecc[swebench]",
    )
    summary, stderr = _run(EXAMPLE / "run.py", EXAMPLE / "swebench-run", tmp_path)
    checks = summary["checks"]
    assert checks["webapp__webapp-7:original"]["parser"] == "django"
    assert checks["webapp__webapp-7:original"]["parser_package"].startswith("swebench==")
    assert checks["calc__calc-1:original"]["parser"] == "pytest"
    assert {c["rule"] for c in checks.values()} == {"official"}
    # the first grading says what SWE-bench's harness said, on every attempt it reported on
    assert summary["report_agreement"] == {"agree": 6, "disagree": 0}
    assert summary["recorded"]["calc__calc-1@rollout-0"] == "fail"  # gold, failed by the label
    # the fix: calc's attempts re-parsed (the gold one now passes), webapp's reused
    decisions = summary["decisions"]
    assert decisions["calc__calc-1@rollout-0"] == ["reparse", "pass"]
    assert decisions["calc__calc-1@rollout-3"] == ["evidence", "fail"]  # did not apply
    assert {decisions[f"webapp__webapp-7@rollout-{i}"][0] for i in range(4)} == {"reuse"}
    assert summary["audit_changed"] == 1
    assert summary["stats"]["executions"] == 0
    assert summary["rewards"]["calc__calc-1@rollout-0"] == 1.0
    # the evaluation that never ran trains as a fail under official: counted and warned
    assert decisions["webapp__webapp-7@rollout-2"] == ["reuse", "fail"]
    assert summary["stats"]["infra_fails"] == 1
    assert "infrastructure reasons" in stderr
    assert "logical" in stderr
    assert summary["epochs_ok"] is True
    assert summary["conflicts"] == 0
    assert (tmp_path / "seals.jsonl").is_file()


def test_the_quickstart_pages_python_blocks_run_in_order_as_written(tmp_path: Path) -> None:
    """rule: E-REPLAY-5, E-SEAL-7, E-AUDIT-3, E-AUDIT-4: a reader pasting the quickstart's
    Python blocks, in order, into one session at the repository root gets what the page says
    they print: the parsers, the first grading agreeing with report.json, the fix re-parsed
    with nothing executed, the infrastructure failure counted, and clean audits."""
    pytest.importorskip(
        "swebench.harness.log_parsers",
        reason="the quickstart grades a Django instance with swebench's parser: reef-ecc[swebench]",
    )
    if not QUICKSTART_PAGE.is_file():
        pytest.skip("the docs are not beside these tests (an installed reef-ecc's tests)")
    blocks = _PYTHON_BLOCK.findall(QUICKSTART_PAGE.read_text(encoding="utf-8"))
    assert len(blocks) == 5  # checks, records, the fix, the seals, the audits
    done = subprocess.run(
        [sys.executable, "-c", "\n".join(blocks)],
        cwd=REPOSITORY,
        env={**os.environ, "TMPDIR": str(tmp_path)},  # the page's mkdtemp lands in tmp_path
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == [
        "calc__calc-1:original pytest None",
        f"webapp__webapp-7:original django swebench=={_swebench_version()}",
        "first grading: 6 verdicts as the harness's report.json",
        "1",
        "g1 {'reparse': 3, 'evidence': 1, 'reuse': 4} 0",
        "1.0",
        "1",
    ]
    assert "webapp__webapp-7@rollout-2" in done.stderr  # the infrastructure warning
    assert "logical" in done.stderr


def _swebench_version() -> str:
    from agent_ecc.adapters import parsers

    found = parsers.installed()
    assert found is not None
    return found.version
