"""The executor protocol (``run(ExecRequest) -> RawOutput``), held by two backends that run here.

``docs/ecc/reverification.md`` ("Plugging in your own sandbox") states what an executor owes
the scorer; these tests check it of the git executor (a subprocess in a fresh folder) and of the
bubblewrap executor (every command of the run in bubblewrap namespaces), on the real calc task:
the same verdicts and application records for every attempt, patches applied as swebench's
harness applies them (each attempt recorded), the timeout, a missing snapshot and a check of
another runtime answered as raw outputs, never as exceptions or verdicts. A new backend is
held to the same by adding it to ``BACKENDS``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import attrs
import pytest

from agent_ecc.adapters.swebench import SWEBenchAdapter
from agent_ecc.execution import (
    PATCH_STRATEGIES,
    STRATEGY_NAMES,
    ExecRequest,
    RawOutput,
    request_identity,
)
from agent_ecc.recompute.bubblewrap import BubblewrapExecutor
from agent_ecc.recompute.executor import Executor
from agent_ecc.recompute.service import HTTPBackend
from agent_ecc.records import Application, ExecutionRecord, Run
from agent_ecc.store import ContentStore, put_text
from agent_ecc.versions import Check, iter_checks

fixtures = sys.modules["agent_ecc_test_fixtures"]

#: The backends held to the protocol: a name and how to make one on a content store.
BACKENDS: dict[str, Callable[[ContentStore], Any]] = {
    "git": Executor,
    "bubblewrap": BubblewrapExecutor,
}


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, swe_store: ContentStore) -> Any:
    if request.param == "bubblewrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (scripts/setup installs it)")
    return BACKENDS[request.param](swe_store)


def _check(swe: Any, index: int = 1) -> Check:
    (check,) = iter_checks(swe.version(index).lookup(fixtures.TASK, fixtures.WORLD).spec)
    return check


def _request(swe: Any, patch: str, check: Check | None = None, **execution: Any) -> ExecRequest:
    check = check or _check(swe)
    if execution:
        check = attrs.evolve(check, execution={**check.execution, **execution})
    record = swe.adapter.record(
        store=swe.store, task_id=fixtures.TASK, trajectory_id="a", image="w", patch=patch, runs=[]
    )
    return SWEBenchAdapter().request(check, record, swe.store)


def _grade(swe: Any, out: RawOutput, check: Check | None = None) -> str:
    check = check or _check(swe)
    return str(swe.adapter.grade(check, swe.adapter.run_from_output(check, out, swe.store),
                                 swe.store))  # fmt: skip


def test_every_attempt_gets_the_verdict_and_the_record_of_the_reference_executor(
    swe: Any, backend: Any, executor: Executor
) -> None:
    """rule: E-GRADE-4: on each backend, each calc attempt (and the patches only swebench's
    whole chain applies) gets the raw output the git executor gives it: applied or not, the
    same attempts and steps, the same verdict, the request's identity echoed."""
    expected = {**{name: verdicts[1] for name, verdicts in fixtures.EXPECTED.items()},
                "drifted": "pass", "reapplied": "fail"}  # fmt: skip
    for variant, patch in swe.patches.items():
        request = _request(swe, patch)
        out, reference = backend.run(request), executor.run(request)
        assert isinstance(out, RawOutput)
        assert out.request_id == request.request_id
        assert out.error is None, (variant, out.error)
        assert out.applied == reference.applied, variant
        assert out.application == reference.application, variant
        assert _grade(swe, out) == expected[variant], (variant, out.log)


def test_a_patch_whose_context_drifted_applies_as_in_swebench_by_its_last_strategy(
    swe: Any, backend: Any
) -> None:
    """swebench 5.0.2 applies a patch git cannot (its context drifted) with ``patch
    --fuzz=5``, the tree reset between the attempts: so does every backend, recording each."""
    out = backend.run(_request(swe, swe.patches["drifted"]))
    assert out.applied
    assert out.application == Application(
        applied=True,
        attempts=STRATEGY_NAMES,
        steps=(*(f"{name}: exit 1" for name in STRATEGY_NAMES[:3]), f"{STRATEGY_NAMES[3]}: exit 0"),
        reverse_check=False,  # its context is not the tree's: git cannot reverse it either
    )
    assert _grade(swe, out) == "pass"
    assert [" ".join(s) for s in PATCH_STRATEGIES][-1] == "patch --batch --forward --fuzz=5 -p1 -i"


def test_a_patch_applied_already_is_taken_as_applied_and_its_tests_run(
    swe: Any, backend: Any
) -> None:
    """When every strategy fails, swebench's harness checks that the patch's reverse applies
    ("verified already applied") and runs the tests: so does every backend."""
    out = backend.run(_request(swe, swe.patches["reapplied"]))
    assert out.applied
    assert out.application is not None
    assert out.application.attempts == STRATEGY_NAMES
    assert out.application.steps[-1] == "git apply --check --reverse: exit 0"
    assert out.log is not None
    assert ">>>>> Start Test Output" in out.log
    assert _grade(swe, out) == "fail"  # the tree is the unfixed one


def test_past_its_timeout_the_script_is_killed_and_timed_out(swe: Any, backend: Any) -> None:
    """rule: E-GRADE-4: a script past its timeout is killed with its children; timed out."""
    script = put_text(swe.store, "echo started\n(sleep 60 &)\nsleep 60\n")
    out = backend.run(_request(swe, "", eval_script=script, timeout_s=1.0))
    assert out.timed_out
    assert out.exit_code is None
    assert out.log is not None
    assert "started" in out.log
    assert out.duration_s < 30


def test_what_cannot_run_is_a_stopped_output_never_an_exception(swe: Any, backend: Any) -> None:
    """A missing snapshot (infrastructure) and a check of another runtime are raw outputs
    with the error and no verdict of the patch's own."""
    missing = backend.run(_request(swe, swe.patches["gold"], image="sha256:" + "0" * 64))
    assert missing.application is not None
    assert missing.application.infra_error
    assert not missing.applied
    assert missing.log is None
    assert _grade(swe, missing) == "undeterminable"  # g1 grades with the logical rule
    docker = backend.run(_request(swe, swe.patches["gold"], runtime="docker", workdir="/testbed"))
    assert docker.error is not None
    assert "runtime docker" in docker.error


def test_the_script_has_no_network(swe: Any, backend: Any) -> None:
    if backend.network == "none":
        pytest.skip("this machine gives the git executor no network namespace")
    probe = (
        'python -c "import socket\n'
        "try:\n socket.create_connection(('1.1.1.1', 53), timeout=2); print('net: yes')\n"
        "except OSError: print('net: no')\"\n"
    )
    out = backend.run(_request(swe, "", eval_script=put_text(swe.store, probe)))
    assert out.log is not None
    assert "net: no" in out.log, out.log


def test_a_record_made_with_fewer_strategies_is_no_evidence_that_the_patch_does_not_apply(
    swe: Any,
) -> None:
    """An earlier executor tried two ``git apply`` strategies: its "does not apply" is no
    evidence of swebench's (which may apply the patch), so the check runs again; a record that
    tried every strategy, or the harness's own, is."""
    check = _check(swe)

    def record(attempts: tuple[str, ...]) -> ExecutionRecord:
        application = Application(applied=False, attempts=attempts)
        run = Run(check.check_id, dict(check.execution), check.execution_identity, None, False,
                  application=application)  # fmt: skip
        return swe.adapter.record(store=swe.store, task_id=fixtures.TASK, trajectory_id="r",
                                  image="w", patch=swe.patches["drifted"], runs=[run])  # fmt: skip

    earlier = ("git apply --verbose", "git apply --verbose --ignore-whitespace -C1")
    assert swe.adapter.evidence(check, record(earlier), swe.store) is None
    assert swe.adapter.evidence(check, record(STRATEGY_NAMES), swe.store) == "fail"
    assert swe.adapter.evidence(check, record(("swebench harness",)), swe.store) == "fail"
    request = swe.adapter.request(check, record(earlier), swe.store)
    assert request.request_id == request_identity(check.execution_identity, request.patch)


def test_the_service_serves_the_bubblewrap_executor_over_http(swe: Any, swe_store: Any) -> None:
    """``python -m agent_ecc.recompute.service --bubblewrap`` runs the second backend: what
    it answers over HTTP is the protocol's raw output."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (scripts/setup installs it)")
    command = [sys.executable, "-m", "agent_ecc.recompute.service", "--store",
               str(swe_store.root), "--port", "0", "--bubblewrap"]  # fmt: skip
    service = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert service.stdout is not None
        started = json.loads(service.stdout.readline())
        assert started["runtime"] == "git"
        assert started["network"] == "bubblewrap --unshare-all"
        backend = HTTPBackend(started["url"])
        request = _request(swe, swe.patches["drifted"])
        out = backend.submit(request).result(timeout=120)
        backend.close()
        assert isinstance(out, RawOutput)
        assert out.applied
        assert out.application is not None
        assert out.application.attempts == STRATEGY_NAMES
        assert _grade(swe, out) == "pass"
    finally:
        service.terminate()
        service.wait(timeout=30)
