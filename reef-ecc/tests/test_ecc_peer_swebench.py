"""Peer check: the ``official`` rule agrees with the public swebench package on the same logs.

The logs are real (every calc attempt through the original and the hardened eval scripts),
plus the synthetic world's and a few edge cases. swebench's harness imports container clients
(docker, modal) and datasets at import time, so it is never a dependency of reef-ecc: this test
installs swebench 5.0.2 with what its grading module's import needs into a throwaway target
folder (kept in the system's temporary folder between runs, install bounded in time) and runs
the peer's ``get_logs_eval``, ``get_eval_tests_report`` and ``get_resolution_status`` in a
subprocess, so its packages never mix with this process's. It is skipped, saying why, only when
that install fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from agent_ecc.adapters.swebench import SWEBenchAdapter
from agent_ecc.recompute.executor import Executor
from agent_ecc.records import Run
from agent_ecc.store import ContentStore, put_text
from agent_ecc.synthetic import BEHAVIOURS, SyntheticExecutor
from agent_ecc.versions import iter_checks

fixture_script = sys.modules["agent_ecc_test_fixtures"]

PEER = "swebench==5.0.2"
# What `import swebench.harness.grading` needs beyond swebench itself (found by importing it).
PEER_IMPORTS = ("docker", "unidiff", "datasets", "python-dotenv", "modal", "tenacity")
INSTALL_TIMEOUT_S = 900

_PEER_SCRIPT = r"""
import json, sys, tempfile
from swebench.harness.grading import get_eval_tests_report, get_logs_eval, get_resolution_status
from swebench.types import TestSpec

cases = json.load(open(sys.argv[1]))
out = []
for case in cases:
    spec = TestSpec(instance_id="calc-1", image="", eval_script_list=[], repo="calc", version="0",
                    FAIL_TO_PASS=case["FAIL_TO_PASS"], PASS_TO_PASS=case["PASS_TO_PASS"],
                    log_parser="parse_log_pytest")
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as handle:
        handle.write(case["log"])
    status_map, ok = get_logs_eval(spec, handle.name)
    if not ok:
        out.append("fail")
        continue
    report = get_eval_tests_report(status_map, {"FAIL_TO_PASS": case["FAIL_TO_PASS"],
                                                "PASS_TO_PASS": case["PASS_TO_PASS"]})
    out.append("pass" if get_resolution_status(report) == "RESOLVED_FULL" else "fail")
print(json.dumps(out))
"""


@pytest.fixture(scope="session")
def peer_path() -> Path:
    """A target folder holding swebench 5.0.2 and its grading module's imports."""
    target = Path(tempfile.gettempdir()) / "agent-ecc-peer-swebench-5.0.2"
    done = target / ".installed"
    if not done.exists():
        pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        start = time.monotonic()
        for extra in (["--no-deps", PEER], list(PEER_IMPORTS)):
            left = INSTALL_TIMEOUT_S - (time.monotonic() - start)
            try:
                subprocess.run(
                    [*pip, "--target", str(target), "--upgrade", *extra],
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=max(1.0, left),
                )
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
                tail = getattr(error, "stderr", "") or ""
                pytest.skip(f"cannot install the peer {PEER} into {target}: {error}; {tail[-300:]}")
        done.touch()
    return target


def _peer(peer_path: Path, cases: list[dict[str, Any]], tmp_path: Path) -> list[str]:
    cases_file = tmp_path / "cases.json"
    cases_file.write_text(json.dumps(cases))
    env = {**os.environ, "PYTHONPATH": str(peer_path)}
    done = subprocess.run(
        [sys.executable, "-c", _PEER_SCRIPT, str(cases_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def _edge_logs() -> list[str]:
    header = ">>>>> Start Test Output\n"
    footer = ">>>>> End Test Output\n"
    return [
        header + "PASSED tests/test_clamp.py::test_clamp_high\n" + footer,  # P2P absent
        header + "XFAIL tests/test_clamp.py::test_clamp_high - known\n" + footer,
        header + "ERROR tests/test_clamp.py::test_clamp_high - boom\n" + footer,
        "no markers at all\nPASSED tests/test_clamp.py::test_clamp_high\n",
        header + ">>>>> Tests Errored\n" + footer,
        header + "collected 0 items\n" + footer + ">>>>> Test Exit Code: 5\n",
    ]


def test_official_verdict_agrees_with_the_swebench_package(
    peer_path: Path, swe: Any, executor: Executor, reference: list[str], tmp_path: Path
) -> None:
    """rule: E-REPLAY-5: on every log, SWEBenchAdapter(verdict="official") decides as the
    public swebench package's end-to-end grading does (resolved only when FULL)."""
    store: ContentStore = swe.store
    adapter = SWEBenchAdapter(verdict="official")
    suite = {
        "FAIL_TO_PASS": list(fixture_script.FAIL_TO_PASS),
        "PASS_TO_PASS": list(fixture_script.PASS_TO_PASS),
    }
    logs: list[tuple[str, str]] = []
    g2 = swe.version(2, reference=reference)
    for variant, patch in swe.patches.items():
        record = swe.adapter.record(
            store=store, task_id="calc-1", trajectory_id=variant, image="w", patch=patch, runs=[]
        )
        for check in iter_checks(g2.lookup(fixture_script.TASK, fixture_script.WORLD).spec):
            out = executor.run(swe.adapter.request(check, record, store))
            if out.log is not None:
                logs.append((f"{variant}:{check.check_id}", out.log))
    for behaviour in BEHAVIOURS:
        out = SyntheticExecutor.output(
            "r", behaviour, {"fix": list(suite["FAIL_TO_PASS"]), "keep": suite["PASS_TO_PASS"]}
        )
        if out.log is not None:
            logs.append((f"synthetic:{behaviour}", out.log))
    logs += [(f"edge:{i}", log) for i, log in enumerate(_edge_logs())]
    check = adapter.check(
        "peer", image=swe.image, eval_script=swe.row["eval_script"], suite=suite, rule="official"
    )
    ours = []
    for _, log in logs:
        run = Run(
            check.check_id, check.execution, check.execution_identity, put_text(store, log), True
        )
        ours.append(adapter.grade(check, run, store))
    theirs = _peer(peer_path, [{"log": log, **suite} for _, log in logs], tmp_path)
    disagreements = [
        (name, mine, peer)
        for (name, _), mine, peer in zip(logs, ours, theirs, strict=True)
        if mine != peer
    ]
    assert disagreements == []
    assert {"pass", "fail"} <= set(ours)
    verdicts = dict(zip((name for name, _ in logs), ours, strict=True))
    # the two 4.1 bugs are graded as the package grades them today
    assert verdicts["skip:calc-1:original"] == "fail"
    assert verdicts["forge:calc-1:original"] == "fail"
    assert verdicts["gold:calc-1:original"] == "pass"
