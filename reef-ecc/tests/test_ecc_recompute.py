"""The executor and the re-verification service, run for real (git, bash, pytest, HTTP on
loopback): application records, limits, scrubbed environment, no network, capacity, refusals,
retries and the transport stats (E-GRADE-4, E-SEAL-10, I2)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from agent_ecc import Candidate, DirectoryRegistry, Member, Scorer, SealSession
from agent_ecc.execution import STRATEGY_NAMES, ExecRequest, InfraFailure, RawOutput
from agent_ecc.recompute.executor import Executor, Limits
from agent_ecc.recompute.service import HTTPBackend, ReverifyService
from agent_ecc.recompute.wire import request_to_json
from agent_ecc.store import ContentStore, put_text

# conftest.py loaded the fixture script under this name (tests/ is not a package)
fixture_script = sys.modules["agent_ecc_test_fixtures"]


def _request(swe: Any, script: str, *, patch: str = "", timeout_s: float = 30.0) -> ExecRequest:
    """A request running ``script`` on the calc snapshot with ``patch`` applied."""
    check = swe.adapter.check(
        "custom",
        image=swe.image,
        eval_script=put_text(swe.store, script),
        suite={"FAIL_TO_PASS": [], "PASS_TO_PASS": []},
        rule="logical",
        timeout_s=timeout_s,
    )
    record = swe.adapter.record(
        store=swe.store, task_id="calc-1", trajectory_id="x", image="w", patch=patch, runs=[]
    )
    return swe.adapter.request(check, record, swe.store)


def _original_request(swe: Any, variant: str) -> ExecRequest:
    check = swe.version(1).lookup(fixture_script.TASK, fixture_script.WORLD).spec
    record = swe.adapter.record(
        store=swe.store,
        task_id=fixture_script.TASK,
        trajectory_id=variant,
        image=fixture_script.WORLD,
        patch=swe.patches[variant],
        runs=[],
    )
    return swe.adapter.request(check, record, swe.store)


# -- the executor ------------------------------------------------------------------------------


def test_patch_that_does_not_apply_is_a_fail_and_a_stopped_executor_no_verdict(
    swe: Any, executor: Executor
) -> None:
    """rule: E-GRADE-4, I2: a patch that does not apply by any of swebench's strategies is a
    fail (every strategy recorded); an executor that cannot check out the snapshot stopped:
    undeterminable, except under official."""
    check = swe.version(1).lookup(fixture_script.TASK, fixture_script.WORLD).spec
    out = executor.run(_original_request(swe, "noapply"))
    assert not out.applied
    assert out.error is None
    assert out.application is not None
    assert not out.application.stopped
    assert out.application.attempts == STRATEGY_NAMES
    assert out.application.steps == (
        *(f"{name}: exit 1" for name in STRATEGY_NAMES), "git apply --check --reverse: exit 1"
    )  # fmt: skip
    run = swe.adapter.run_from_output(check, out, swe.store)
    assert swe.adapter.grade(check, run, swe.store) == "fail"
    gold = executor.run(_original_request(swe, "gold"))
    assert gold.applied
    assert gold.application is not None
    assert gold.application.reverse_check
    missing = attrs.evolve(
        _original_request(swe, "gold"),
        execution={**check.execution, "image": "sha256:" + "0" * 64},
    )
    stopped = executor.run(missing)
    assert stopped.application is not None
    assert stopped.application.infra_error
    run = swe.adapter.run_from_output(check, stopped, swe.store)
    assert swe.adapter.grade(check, run, swe.store) == "undeterminable"
    official = attrs.evolve(check, grading={**check.grading, "rule": "official"})
    assert swe.adapter.grade(official, run, swe.store) == "fail"


def test_environment_is_scrubbed_and_memory_limited(swe: Any, swe_store: ContentStore) -> None:
    """The script sees only the executor's environment and its memory limit."""
    os.environ["AGENT_ECC_TEST_SECRET"] = "do-not-leak"
    try:
        executor = Executor(swe_store, limits=Limits(memory_mb=256))
        out = executor.run(
            _request(
                swe,
                "env | sort\npython -c 'bytearray(1024 * 1024 * 1024)' || echo alloc-refused-$?\n",
            )
        )
    finally:
        del os.environ["AGENT_ECC_TEST_SECRET"]
    assert out.log is not None
    assert "do-not-leak" not in out.log
    names = {line.split("=", 1)[0] for line in out.log.splitlines() if "=" in line}
    assert "AGENT_ECC_TEST_SECRET" not in names
    assert "HOME" in names
    assert "MemoryError" in out.log
    assert "alloc-refused-1" in out.log


def test_no_network_where_the_machine_allows_it(swe: Any, executor: Executor) -> None:
    """A script cannot reach a server listening on the host's loopback."""
    if not executor.isolation:
        pytest.skip("this machine allows no network namespace (unshare); runs keep the network")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    try:
        script = (
            'python -c \'import socket; socket.create_connection(("127.0.0.1", '
            f"{port}), timeout=3)' && echo reached || echo unreachable\n"
        )
        out = executor.run(_request(swe, script))
    finally:
        listener.close()
    assert out.log is not None
    assert "unreachable" in out.log
    assert "reached\n" not in out.log
    assert Executor(swe.store, isolate_network=False).network == "none"


# -- the service over HTTP -------------------------------------------------------------------


@pytest.fixture
def service(swe_store: ContentStore, executor: Executor):
    with ReverifyService(swe_store, executor=executor, capacity=2) as running:
        yield running


def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    host, port = url.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("POST", "/v1/execute", body=body, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, json.loads(answer.read() or b"null")
    finally:
        connection.close()


def test_service_answers_raw_outputs_never_verdicts(
    swe: Any, service: ReverifyService, executor: Executor
) -> None:
    """rule: I2: the service returns the log and run facts of a real run, and no verdict."""
    request = _original_request(swe, "gold")
    backend = HTTPBackend(service.url)
    try:
        out = backend.submit(request).result()
    finally:
        backend.close()
    assert isinstance(out, RawOutput)
    assert out.applied
    assert out.log is not None
    assert "PASSED tests/test_clamp.py" in out.log
    assert out.attempts == 1
    assert out.failures == ()
    status, body = _post(service.url, json.dumps(request_to_json(request)).encode())
    assert status == 200
    assert "verdict" not in json.dumps(body)
    assert service.health()["counters"]["executed"] == 2


def test_refused_requests_name_the_field_and_run_nothing(
    swe: Any, service: ReverifyService
) -> None:
    """A malformed, oversized or inconsistent request is a 4xx naming the field; nothing runs."""
    good = request_to_json(_original_request(swe, "gold"))
    cases = [
        ({k: v for k, v in good.items() if k != "patch"}, 400, "$.patch"),
        ({**good, "extra": 1}, 400, "$.extra"),
        ({**good, "execution": {**good["execution"], "timeout_s": -1}}, 422, "timeout_s"),
        ({**good, "execution": {**good["execution"], "timeout_s": True}}, 400, "timeout_s"),
        ({**good, "request_id": "0" * 64}, 422, "$.request_id"),
        ({**good, "patch": "sha256:" + "1" * 64}, 422, "$.patch"),
        ({**good, "patch": "../../etc/passwd"}, 400, "$.patch"),
        ({**good, "adapter": "other"}, 422, "$.adapter"),
        ({**good, "execution": {**good["execution"], "image": 3}}, 400, "$.execution.image"),
    ]
    for body, status, field in cases:
        got, answer = _post(service.url, json.dumps(body).encode())
        assert (got, field in answer["field"]) == (status, True), (body, answer)
    assert _post(service.url, b"{not json")[0] == 400
    assert _post(service.url, b"x" * (service.max_body + 1))[0] == 413
    assert service.health()["counters"].get("executed", 0) == 0


def test_capacity_bounds_concurrent_executions(swe: Any, swe_store: ContentStore, tmp_path: Path):
    """At most ``capacity`` executions run at once, whatever the number of clients."""
    marks = tmp_path / "marks"
    script = f"echo start >> {marks}\nsleep 0.3\necho end >> {marks}\n"
    requests = [_request(swe, script + f"# {i}\n") for i in range(4)]
    with ReverifyService(swe_store, capacity=1) as service:
        backend = HTTPBackend(service.url, capacity=4)
        try:
            outs = [f.result() for f in [backend.submit(r) for r in requests]]
        finally:
            backend.close()
    assert all(isinstance(o, RawOutput) for o in outs)
    running, peak = 0, 0
    for line in marks.read_text().split():
        running += 1 if line == "start" else -1
        peak = max(peak, running)
    assert peak == 1


def test_retries_before_evaluation_and_transport_stats(
    swe: Any, registry: DirectoryRegistry, world: Any
) -> None:
    """rule: E-SEAL-10, I2: a post that cannot connect is tried three times with backoff, then
    given up; the seal's stats count it and the member is undeterminable, not failed."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]  # closed again: nothing listens there
    backend = HTTPBackend(f"http://127.0.0.1:{port}", backoff_s=0.01, seed=1)
    out = backend.post(_original_request(swe, "gold"))
    assert isinstance(out, InfraFailure)
    assert out.reason == "transport"
    assert (out.attempts, out.failures) == (3, ("connect", "connect", "connect"))
    short = HTTPBackend(f"http://127.0.0.1:{port}", backoff_s=5.0, deadline_s=1.0)
    assert short.post(_original_request(swe, "gold")).attempts == 1  # no retry past deadline
    registry.publish_grader(world.version(1), source="fix")
    record, score = world.produce(registry.grader("g0"), "t1", "m0", "crash")
    record = attrs.evolve(record, runs=())  # nothing stored to re-parse: it must re-execute
    scorer = Scorer([world.adapter], world.store, backend=backend)
    decision = (
        SealSession(registry, scorer, "1")
        .assemble([Candidate("g", None, (Member("m0", record, score, 1.0),))])
        .decision
    )
    assert decision.stats["transport"] == {
        "attempts": 3,
        "retried": 1,
        "given_up": 1,
        "failures": {"connect": 3},
    }
    assert decision.members[0].type == "undeterminable"


def test_busy_service_is_retried_until_a_slot_frees(swe: Any, swe_store: ContentStore) -> None:
    """rule: E-SEAL-10: a 503 (no free slot, nothing ran) is retried with backoff."""
    slow = _request(swe, "sleep 1.5\n")
    with ReverifyService(swe_store, capacity=1, queue_timeout_s=0.05) as service:
        first = HTTPBackend(service.url)
        running = first.submit(slow)
        started = threading.Event()
        while not started.wait(0.01):  # the slot is taken once the service reports it running
            if service.health()["running"] == 1:
                started.set()
        second = HTTPBackend(service.url, attempts=8, backoff_s=0.2, seed=3)
        out = second.post(_original_request(swe, "gold"))
        assert isinstance(running.result(), RawOutput)
        first.close()
        second.close()
    assert isinstance(out, RawOutput)
    assert out.attempts > 1
    assert set(out.failures) == {"unavailable"}


# -- fuzz ------------------------------------------------------------------------------------

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=12,
)


@st.composite
def _bodies(draw: st.DrawFn, good: dict[str, Any]) -> bytes:
    kind = draw(st.sampled_from(["bytes", "json", "mutated"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "json":
        return json.dumps(draw(_json)).encode()
    body = json.loads(json.dumps(good))
    key = draw(st.sampled_from([*good, *good["execution"], "new"]))
    target = body["execution"] if key in good["execution"] else body
    if draw(st.booleans()) and key in target:
        del target[key]
    else:
        target[key] = draw(_json)
    return json.dumps(body).encode()


def test_fuzzed_bodies_get_no_5xx_and_run_nothing(swe: Any, swe_store: ContentStore) -> None:
    """rule: I2: whatever the body, the service answers 4xx (or runs a valid request): no 5xx,
    and nothing is executed for a refused request."""
    good = request_to_json(_original_request(swe, "gold"))
    with ReverifyService(swe_store, capacity=1) as service:

        @settings(
            max_examples=150,
            suppress_health_check=[HealthCheck.function_scoped_fixture],
        )
        @given(_bodies(good))
        def check(body: bytes) -> None:
            before = service.health()["counters"].get("executed", 0)
            status, _ = _post(service.url, body, {"Content-Type": "application/json"})
            assert status < 500
            executed = service.health()["counters"].get("executed", 0) - before
            assert executed == (1 if status == 200 else 0)

        check()
