"""Contract tests of the container executor (runtime ``docker``).

By default they run against the Docker Engine stand-in (``fixtures/docker_standin.py``): no
daemon runs on the machines where the tests run. With ``AGENT_ECC_DOCKER_URL`` and
``AGENT_ECC_DOCKER_IMAGE`` set (an image holding the calc repository at ``/testbed`` with git,
python and pytest), the same tests run against that real daemon: ``scripts/docker-check``
builds the image and does it. Tests that read what only the stand-in records say so and skip
there.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from agent_ecc.adapters.swebench import SWEBenchAdapter, conjunction_version
from agent_ecc.execution import ExecRequest
from agent_ecc.recompute.container import ContainerExecutor
from agent_ecc.recompute.executor import Executor, Limits
from agent_ecc.recompute.service import HTTPBackend, ReverifyService
from agent_ecc.scorer import Scorer
from agent_ecc.store import ContentStore, put_text
from agent_ecc.versions import Check, GraderVersion, iter_checks

pytest.importorskip("docker", reason="the docker extra is not installed: reef-ecc[docker]")

fixtures = sys.modules["agent_ecc_test_fixtures"]
standin_module = sys.modules["agent_ecc_docker_standin"]

STANDIN_IMAGE = "agent-ecc-check/calc:latest"
DOCUMENTED = {"version", "create", "archive", "start", "wait", "kill", "inspect", "logs", "remove"}


@attrs.frozen
class Engine:
    """The daemon the tests talk to: the stand-in (``standin`` set) or a real one."""

    base_url: str
    image: str
    standin: Any


@pytest.fixture(scope="module")
def engine(swe: Any) -> Iterator[Engine]:
    real = os.environ.get("AGENT_ECC_DOCKER_URL")
    if real:
        yield Engine(real, os.environ["AGENT_ECC_DOCKER_IMAGE"], None)
        return
    # a short folder: a unix socket's path is limited to about 100 bytes
    folder = Path(tempfile.mkdtemp(prefix="ecc-dk-"))
    try:
        image = folder / "images" / "calc"
        image.mkdir(parents=True)
        bundle = folder / "calc.bundle"
        bundle.write_bytes(swe.store.get_bytes(swe.image))
        subprocess.run(
            ["git", "clone", "--quiet", str(bundle), str(image / "testbed")],
            check=True,
            capture_output=True,
        )
        standin = standin_module.DockerStandIn(folder, {STANDIN_IMAGE: image}).start()
        try:
            yield Engine(standin.base_url, STANDIN_IMAGE, standin)
        finally:
            standin.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _standin(engine: Engine) -> Any:
    if engine.standin is None:
        pytest.skip("reads what the stand-in records of the calls; a real daemon keeps no record")
    return engine.standin


def _versions(swe: Any, engine: Engine) -> tuple[GraderVersion, GraderVersion]:
    """The calc task's original suite under runtime git (the bundle) and docker (the image)."""
    adapter = SWEBenchAdapter()
    common = {"version_id": "g", "world": "w", "store": swe.store, "adapter": adapter}
    git = conjunction_version([swe.row], [], **common)
    docker = conjunction_version(
        [{**swe.row, "image": engine.image}], [], runtime="docker", **common
    )
    return git, docker


def _check(version: GraderVersion) -> Check:
    (check,) = iter_checks(version.lookup(fixtures.TASK, "w").spec)
    return check


def _request(swe: Any, check: Check, patch: str, **execution: Any) -> ExecRequest:
    if execution:
        check = attrs.evolve(check, execution={**check.execution, **execution})
    record = swe.adapter.record(
        store=swe.store, task_id=fixtures.TASK, trajectory_id="a", image="w", patch=patch, runs=[]
    )
    return SWEBenchAdapter().request(check, record, swe.store)


def test_container_runs_grade_as_the_git_executors_runs(
    swe: Any, engine: Engine, executor: Executor
) -> None:
    """rule: E-GRADE-4: every calc attempt run in the instance's image gets the verdict and
    the application record it gets from the git executor: patches that do not apply fail
    without an error, the empty patch runs the unmodified tree, the eval script's log is graded."""
    git, docker = _versions(swe, engine)
    container = ContainerExecutor(swe.store, base_url=engine.base_url)
    adapter = SWEBenchAdapter()
    for variant, patch in swe.patches.items():
        outputs = {}
        for version, runner in ((git, executor), (docker, container)):
            check = _check(version)
            out = runner.run(_request(swe, check, patch))  # type: ignore[attr-defined]
            run = adapter.run_from_output(check, out, swe.store)
            outputs[runner] = (adapter.grade(check, run, swe.store), out)
        (git_verdict, git_out), (docker_verdict, docker_out) = outputs.values()
        assert docker_verdict == git_verdict, variant
        assert docker_out.error is None, (variant, docker_out.error)
        assert docker_out.applied == git_out.applied, variant
        application = docker_out.application
        assert application is not None
        assert git_out.application is not None
        assert application.attempts == git_out.application.attempts, variant
        assert application.steps == git_out.application.steps, variant
        assert application.reverse_check == git_out.application.reverse_check, variant
        if docker_out.applied:
            assert docker_out.log is not None
            assert ">>>>> Start Test Output" in docker_out.log
            assert docker_out.exit_code == git_out.exit_code, variant
            assert "agent-ecc-" not in docker_out.log  # the runner's lines are not the log
    if engine.standin is not None:
        assert engine.standin.containers == {}  # every container removed


def test_the_executor_asks_for_the_limits_and_makes_only_the_documented_calls(
    swe: Any, engine: Engine
) -> None:
    """The container gets the git executor's limits (memory without swap, processes, file
    size, CPU, no core files), no network, no privilege gain and nothing of this process's
    environment; the executor calls nothing the module does not document."""
    standin = _standin(engine)
    limits = Limits(memory_mb=768, processes=64, file_mb=32, cpu_slack_s=5.0)
    container = ContainerExecutor(swe.store, base_url=engine.base_url, limits=limits)
    _, docker = _versions(swe, engine)
    before = len(standin.created)
    out = container.run(_request(swe, _check(docker), swe.patches["gold"]))
    assert out.applied
    (body,) = standin.created[before:]
    host = body["HostConfig"]
    mb = 1024 * 1024
    assert host["Memory"] == host["MemorySwap"] == 768 * mb
    assert host["PidsLimit"] == 64
    assert host["NetworkMode"] == "none"
    assert body["NetworkDisabled"] is True
    assert host["SecurityOpt"] == ["no-new-privileges"]
    cpu = int(60.0 + 60.0 + 5.0) + 1  # the check's timeout_s, the apply allowance, the slack
    assert {u["Name"]: (u["Soft"], u["Hard"]) for u in host["Ulimits"]} == {
        "cpu": (cpu, cpu),
        "fsize": (32 * mb, 32 * mb),
        "core": (0, 0),
    }
    assert not body.get("Env")  # no proxy settings, tokens or anything else of ours
    assert body["Image"] == engine.image
    assert standin.unexpected == []
    assert {name for _, name in standin.calls} <= DOCUMENTED


def test_a_script_past_its_time_is_killed_and_timed_out(swe: Any, engine: Engine) -> None:
    """rule: E-GRADE-4: the wall-clock limit kills the container; a run whose eval script had
    started is timed out (a fail, the patch's doing), and the container is removed."""
    script = put_text(swe.store, "#!/bin/bash\necho started\nsleep 60\n")
    _, docker = _versions(swe, engine)
    check = _check(docker)
    request = _request(swe, check, swe.patches["gold"], eval_script=script, timeout_s=1.0)
    container = ContainerExecutor(swe.store, base_url=engine.base_url, apply_timeout_s=2.0)
    out = container.run(request)
    assert out.timed_out
    assert out.exit_code is None
    assert out.error is None
    assert out.log is not None
    assert "started" in out.log
    timed = attrs.evolve(check, execution=request.execution)
    run = SWEBenchAdapter().run_from_output(timed, out, swe.store)
    logical = attrs.evolve(timed, grading={**timed.grading, "rule": "logical"})
    assert SWEBenchAdapter().grade(logical, run, swe.store) == "fail"
    if engine.standin is not None:
        assert ("POST", "kill") in engine.standin.calls
        assert engine.standin.containers == {}


def test_an_image_not_on_the_daemon_is_an_infrastructure_failure(swe: Any, engine: Engine) -> None:
    """rule: E-GRADE-4, I2: a missing image stops the executor (no verdict of the patch's):
    official grades it a fail, flagged as infrastructure; logical leaves it undeterminable."""
    _, docker = _versions(swe, engine)
    check = _check(docker)
    absent = "agent-ecc-check/absent@sha256:" + "0" * 64
    request = _request(swe, check, swe.patches["gold"], image=absent)
    out = ContainerExecutor(swe.store, base_url=engine.base_url).run(request)
    assert out.error is not None
    assert "not on the Docker daemon" in out.error
    assert out.application is not None
    assert out.application.infra_error == out.error
    moved = attrs.evolve(check, execution=request.execution)
    run = SWEBenchAdapter().run_from_output(moved, out, swe.store)
    assert run.stopped
    assert SWEBenchAdapter().grade(moved, run, swe.store) == "fail"  # the check's rule: official
    logical = attrs.evolve(moved, grading={**moved.grading, "rule": "logical"})
    assert SWEBenchAdapter().grade(logical, run, swe.store) == "undeterminable"


def test_memory_and_log_limits_hold(swe: Any, engine: Engine) -> None:
    """A script that allocates past the memory limit does not complete; a long log is cut at
    ``log_bytes`` and says so."""
    _, docker = _versions(swe, engine)
    check = _check(docker)
    script = put_text(
        swe.store,
        "#!/bin/bash\npython -c 'b = bytearray(8 * 2**20); print(\"small ok\")'\n"
        "python -c 'b = bytearray(1024 * 2**20); print(\"large ok\")'\n"
        "echo \"large exit $?\"\nhead -c 200000 /dev/zero | tr '\\0' x\n",
    )
    limits = Limits(memory_mb=256, log_bytes=20_000)
    container = ContainerExecutor(swe.store, base_url=engine.base_url, limits=limits)
    out = container.run(_request(swe, check, "", eval_script=script))
    assert out.log is not None
    assert "small ok" in out.log
    assert "large ok" not in out.log
    assert "large exit 0" not in out.log
    assert out.log.rstrip().endswith("bytes cut]")
    assert len(out.log.encode()) < 21_000


def test_the_container_has_no_network(swe: Any, engine: Engine) -> None:
    """A server listening on this machine's loopback cannot be reached from the eval script."""
    if engine.standin is not None and not engine.standin.isolates_network:
        pytest.skip("this machine allows no network namespace for the stand-in's processes")
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    accepted: list[Any] = []
    listener = threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True)
    listener.start()
    probe = (
        "import socket\ntry:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "    print('reached')\nexcept OSError as e:\n    print('unreachable', type(e).__name__)\n"
    )
    script = put_text(swe.store, f"#!/bin/bash\npython - <<'EOF'\n{probe}EOF\n")
    _, docker = _versions(swe, engine)
    try:
        out = ContainerExecutor(swe.store, base_url=engine.base_url).run(
            _request(swe, _check(docker), "", eval_script=script)
        )
        assert out.log is not None
        assert "unreachable" in out.log
        assert accepted == []
        if engine.standin is not None:  # the same probe reaches it with the network left on
            out = ContainerExecutor(swe.store, base_url=engine.base_url, isolate_network=False).run(
                _request(swe, _check(docker), "", eval_script=script)
            )
            assert out.log is not None
            assert "reached" in out.log
    finally:
        server.close()


def test_the_service_runs_docker_checks_and_refuses_the_other_runtime(
    swe: Any, engine: Engine, store: ContentStore
) -> None:
    """A service started with the container executor executes docker checks through
    HTTPBackend, and refuses, naming the field, a git check or an image that is no reference."""
    git, docker = _versions(swe, engine)
    container = ContainerExecutor(swe.store, base_url=engine.base_url)
    with ReverifyService(swe.store, executor=container) as service:
        assert service.health()["runtime"] == "docker"
        backend = HTTPBackend(service.url)
        scorer = Scorer([SWEBenchAdapter()], swe.store, backend=backend)
        out = backend.submit(_request(swe, _check(docker), swe.patches["gold"])).result(60)
        assert scorer.verdict_of(_check(docker), out) == "pass"  # type: ignore[arg-type]
        refused = backend.submit(_request(swe, _check(git), swe.patches["gold"])).result(60)
        assert refused.reason == "refused"  # type: ignore[union-attr]
        assert "$.execution.runtime" in refused.detail  # type: ignore[union-attr]
        bad = _request(swe, _check(docker), swe.patches["gold"], image="not a reference!")
        bad = attrs.evolve(bad, execution_identity="", request_id="")
        refused = backend.submit(bad).result(60)
        assert refused.reason == "refused"  # type: ignore[union-attr]
