"""What CI runs: the crash (SIGKILL), failover and fuzz suites stay in it, PostgreSQL included,
and the soak stays out of it (it runs nightly-style, for minutes: ``scripts/soak``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The suites that kill processes, take leases over, or fuzz the API.
KEPT = (
    "reef-core/tests/test_pipeline_crash.py",
    "reef-core/tests/test_storage_crash.py",
    "reef-core/tests/test_components_local_crash.py",
    "reef-core/tests/test_components_local_fault.py",
    "reef-core/tests/test_generated_tasks_crash.py",
    "reef-core/tests/test_trainer_leases.py",
    "reef-core/tests/test_trainer_job_end.py",
    "reef-core/tests/test_trainer_takeover.py",
    "reef-core/tests/test_server_fuzz.py",
    "tests/test_e2e_serve.py",
)


def test_ci_runs_every_test_folder_without_deselecting_any_mark() -> None:
    script = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "exec bash scripts/test" in ci
    assert "REEF_TEST_DATABASE_URL" in ci  # the PostgreSQL failover tests run in CI
    pytest_lines = [line for line in script.splitlines() if "-m pytest" in line]
    assert pytest_lines
    for line in pytest_lines:
        assert not re.search(r"\s-m\s+['\"]?not|\s-k\s", line), line
    small = re.search(r"^small=\(([^)]*)\)", script, re.MULTILINE)
    assert small is not None
    suites = set(small[1].split()) | set(re.findall(r"^suite \S+ (\S+)", script, re.MULTILINE))
    with_tests = {path.parent.name for path in ROOT.glob("*/tests")}
    assert {*with_tests, "."} <= suites, sorted({*with_tests, "."} - suites)
    assert "soak" not in script + ci  # minutes of load: nightly, never in CI


def test_the_crash_failover_and_fuzz_suites_are_there_and_not_skipped() -> None:
    for name in KEPT:
        path = ROOT / name
        assert path.is_file(), name
        tree = ast.parse(path.read_text(encoding="utf-8"))
        tests = [
            node
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
        ]
        assert tests, name
        # An unconditional skip would keep a suite in CI in name only.
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "skip":
                value = node.value
                assert not (isinstance(value, ast.Attribute) and value.attr == "mark"), name
