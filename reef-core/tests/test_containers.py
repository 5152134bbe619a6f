"""Container operations (``reef.containers``): staging tasks by name, and running a task's
verifier and oracle solution isolated and limited, in the sandbox here and through the Docker
backend against a stand-in of the Docker Engine API.

Every run here is real: bubblewrap namespaces on this machine (``scripts/setup`` installs it).
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import attrs
import pytest

from reef.containers import (
    ContainerBackend,
    ContainerError,
    RunSpec,
    StagingError,
    TaskStaging,
    open_backend,
    run_oracle,
    run_verifier,
)
from reef.containers.docker import DockerBackend, environment_tag
from reef.core.container_settings import ContainerSettings
from reef.core.harbor import HarborTask, HarborTaskError

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup does)"
)

LIMITS = ContainerSettings(timeout_seconds=20, memory_mb=256)

VERIFIER = """\
if [ "$(cat /app/answer.txt 2>/dev/null)" = "5" ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""


def task(
    name: str = "add-2-3", *, test: str = VERIFIER, toml: str = "", **files: str
) -> HarborTask:
    return HarborTask(
        name=name,
        files={
            "task.toml": toml or "[verifier]\ntimeout_sec = 10\n",
            "instruction.md": "What is 2 + 3? Write the number to answer.txt.",
            "tests/test.sh": test,
            "solution/solve.sh": "echo 5 > /app/answer.txt\n",
            **{path.replace("__", "/"): text for path, text in files.items()},
        },
    )


def _load_standin() -> ModuleType:
    """The Docker Engine stand-in; the Docker backend talks to it with httpx (the server
    extra), so its tests skip in an install without it."""
    pytest.importorskip("httpx")
    path = Path(__file__).with_name("docker_engine_standin.py")
    spec = importlib.util.spec_from_file_location("reef_docker_engine_standin", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(params=["sandbox", "docker"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ContainerBackend]:
    """Each backend: the sandbox itself, and Docker through the Engine API stand-in."""
    if request.param == "sandbox":
        yield open_backend(LIMITS, tmp_path / "runs")
        return
    standin = _load_standin().DockerEngineStandIn(tmp_path, images=("python:3.12-slim",))
    with standin:
        docker = DockerBackend(standin.url, default_image="python:3.12-slim")
        yield docker
        docker.close()
        assert standin.unexpected == []
        assert standin.containers == {}, "every container is removed after its run"


# ------------------------------------------------------------------------ staging


def test_staging_the_same_task_again_returns_the_staged_copy(tmp_path: Path) -> None:
    # rule: P-TASK-26
    staging = TaskStaging(tmp_path / "tasks")
    first = staging.stage(task())
    (first.folder / "instruction.md").touch()  # the copy is reused, not written again
    again = staging.stage(task())
    assert again == first
    assert sorted(p.relative_to(first.folder).as_posix() for p in first.folder.rglob("*")
                  if p.is_file()) == sorted([*task().files, ".reef-digest"])  # fmt: skip
    assert (first.folder / "tests" / "test.sh").read_text() == VERIFIER


def test_a_restarted_stager_with_an_empty_tasks_root_stages_the_saved_task_again(
    tmp_path: Path, backend: ContainerBackend
) -> None:
    # rule: P-TASK-26 — the task store is the source; the tasks root holds copies.
    saved = HarborTask.from_json(task().to_json())
    TaskStaging(tmp_path / "tasks").stage(saved)
    shutil.rmtree(tmp_path / "tasks")
    staged = TaskStaging(tmp_path / "tasks").stage(saved)
    assert run_oracle(backend, staged, LIMITS).reward == 1.0


def test_another_task_under_a_staged_name_is_refused(tmp_path: Path) -> None:
    staging = TaskStaging(tmp_path / "tasks")
    staging.stage(task())
    with pytest.raises(StagingError, match="a task name stands for one task"):
        staging.stage(task(test="echo 1 > /logs/verifier/reward.txt\n"))


def test_a_folder_that_is_not_a_staged_task_is_never_written_into(tmp_path: Path) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "tasks" / "add-2-3").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StagingError, match=r"is a link to .*elsewhere"):
        TaskStaging(tmp_path / "tasks").stage(task())
    assert list((tmp_path / "elsewhere").iterdir()) == []
    assert [p.name for p in (tmp_path / "tasks").iterdir()] == ["add-2-3"]


@pytest.mark.parametrize("name", ["../beta/add-2-3", "..", "/abs", "a/b", ".runs", "", "a\x00b"])
def test_a_name_that_is_not_one_folder_under_the_root_is_refused_before_anything_is_read(
    tmp_path: Path, name: str
) -> None:
    # The other scenario's staged task, and an absolute folder, each hold a digest mark.
    beta = TaskStaging(tmp_path / "tasks" / "beta").stage(task())
    alpha = TaskStaging(tmp_path / "tasks" / "alpha")
    if name == "/abs":
        name = str(beta.folder)
    with pytest.raises(StagingError, match="is not a folder name to stage under"):
        alpha.staged(name)


def test_a_link_in_a_tasks_place_is_refused_even_into_the_root(tmp_path: Path) -> None:
    staging = TaskStaging(tmp_path / "tasks")
    real = staging.stage(task())
    (tmp_path / "tasks" / "other").symlink_to(real.folder)
    with pytest.raises(StagingError, match="is a link to"):
        staging.staged("other")
    (tmp_path / "tasks" / "far").symlink_to(TaskStaging(tmp_path / "beta").stage(task()).folder)
    with pytest.raises(StagingError, match="is a link to"):
        staging.staged("far")


def test_a_scenarios_folder_is_proven_to_stay_under_the_tasks_root(tmp_path: Path) -> None:
    pytest.importorskip("anyio", reason="the generator service is the server extra's")
    from reef.core.deployment import GeneratorSection
    from reef.record2sample.generator.service import GeneratorService

    section = GeneratorSection(tasks_root=str(tmp_path / "tasks"))
    service = GeneratorService(section, task_source=lambda scenario, name: None)
    assert service.staging("alpha").root == tmp_path / "tasks" / "alpha"
    for scenario in ("../elsewhere", str(tmp_path), ".runs"):
        with pytest.raises(StagingError, match="is not a folder name"):
            service.staging(scenario)


def test_a_task_whose_task_toml_cannot_be_read_is_not_staged(tmp_path: Path) -> None:
    deep = task("deep", toml="a = " + "[" * 50_000)
    with pytest.raises(HarborTaskError, match=r"task 'deep': task\.toml .*nested too deeply"):
        TaskStaging(tmp_path / "tasks").stage(deep)
    assert not (tmp_path / "tasks" / "deep").exists()


# ------------------------------------------------------------------------ runs


def test_the_oracle_passes_and_an_attempt_is_scored_by_the_verifier(
    tmp_path: Path, backend: ContainerBackend
) -> None:
    staged = TaskStaging(tmp_path / "tasks").stage(task())
    assert run_oracle(backend, staged, LIMITS).reward == 1.0
    assert run_verifier(backend, staged, {"answer.txt": "5"}, LIMITS).reward == 1.0
    wrong = run_verifier(backend, staged, {"answer.txt": "4"}, LIMITS)
    assert (wrong.reward, wrong.timed_out, wrong.exit_code) == (0.0, False, 0)


def test_a_reward_json_is_read_and_a_verifier_that_writes_none_gives_none(
    tmp_path: Path, backend: ContainerBackend
) -> None:
    staging = TaskStaging(tmp_path / "tasks")
    as_json = staging.stage(
        task("json", test="echo '{\"reward\": 0.25}' > /logs/verifier/reward.json\n")
    )
    assert run_verifier(backend, as_json, {}, LIMITS).reward == 0.25
    silent = staging.stage(task("silent", test="echo graded; exit 3\n"))
    verdict = run_verifier(backend, silent, {}, LIMITS)
    assert (verdict.reward, verdict.exit_code) == (None, 3)
    assert "graded" in verdict.output


def test_a_verifier_past_its_timeout_is_killed(tmp_path: Path, backend: ContainerBackend) -> None:
    # rule: P-TASK-7 — the run reports the timeout; the component scores it.
    slow = task("slow", toml="[verifier]\ntimeout_sec = 1\n",
                test="echo 1 > /logs/verifier/reward.txt; sleep 30\n")  # fmt: skip
    verdict = run_verifier(backend, TaskStaging(tmp_path / "tasks").stage(slow), {}, LIMITS)
    assert verdict.timed_out
    assert verdict.reward is None


def test_a_run_has_no_network(tmp_path: Path, backend: ContainerBackend) -> None:
    probe = """\
python3 - <<'EOF'
import socket
try:
    socket.create_connection(("1.1.1.1", 53), timeout=2)
    reward = 1
except OSError:
    reward = 0
open("/logs/verifier/reward.txt", "w").write(str(reward))
EOF
"""
    staged = TaskStaging(tmp_path / "tasks").stage(task("net", test=probe))
    assert run_verifier(backend, staged, {}, LIMITS).reward == 0.0


def test_a_run_is_held_to_its_memory_limit(tmp_path: Path, backend: ContainerBackend) -> None:
    hungry = """\
echo 0 > /logs/verifier/reward.txt
python3 -c "x = bytearray(512 * 1024 * 1024)" && echo 1 > /logs/verifier/reward.txt
"""
    staged = TaskStaging(tmp_path / "tasks").stage(task("hungry", test=hungry))
    assert run_verifier(backend, staged, {}, LIMITS).reward == 0.0


def test_a_run_sees_only_its_own_files(tmp_path: Path, backend: ContainerBackend) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("1")
    escape = f"""\
echo 0 > /logs/verifier/reward.txt
cat {secret} >> /logs/verifier/reward.txt 2>/dev/null
echo tampered > /tests/test.sh 2>/dev/null && echo 1 > /logs/verifier/reward.txt
id -u > /app/uid.txt
"""
    staged = TaskStaging(tmp_path / "tasks").stage(task("escape", test=escape))
    assert run_verifier(backend, staged, {}, LIMITS).reward == 0.0
    assert (staged.folder / "tests" / "test.sh").read_text() == escape


def test_a_reward_file_linked_out_of_the_run_is_not_read(
    tmp_path: Path, backend: ContainerBackend
) -> None:
    link = "ln -s /tests/reward /logs/verifier/reward.txt\n"
    staged = TaskStaging(tmp_path / "tasks").stage(task("link", test=link, tests__reward="1"))
    assert run_verifier(backend, staged, {}, LIMITS).reward is None


# What a hostile verifier tries, in files under the per-file limit: 200 MiB where its attempt
# is, 360 MiB in /tmp with 256 MiB of memory, and a file in / and in /dev.
HOG = """\
for i in 1 2 3 4 5 6 7 8 9 10; do
  head -c 20M /dev/zero > /app/hog$i && echo $i > /app/written
done
for i in 1 2 3 4 5 6; do
  head -c 60M /dev/zero > /tmp/hog$i && echo $i > /logs/tmp-written
done
touch /hog 2>/dev/null && echo yes > /app/root-written
touch /dev/hog 2>/dev/null && echo yes > /app/dev-written
echo 1 > /logs/verifier/reward.txt
"""


def test_a_run_cannot_write_past_its_disk_quota_or_its_memory_and_says_so(
    tmp_path: Path, backend: ContainerBackend
) -> None:
    limits = attrs.evolve(LIMITS, disk_mb=64)
    staged = TaskStaging(tmp_path / "tasks").stage(task("hog", test=HOG))
    verdict = run_verifier(backend, staged, {}, limits)
    assert verdict.reward is None, verdict.output
    assert verdict.limit == (
        "the run reached its disk quota of 64 MiB and its memory limit of 256 MiB (/tmp counts "
        "against it): writing more failed, so it gives no reward"
    )
    assert verdict.output.endswith(f"reef: {verdict.limit}\n")
    # The same run, read back: at most the quota was written, nothing landed in / or /dev,
    # and nothing the run wrote is left on this machine.
    spec = RunSpec(
        files=staged.files("tests"),
        command=("bash", "/tests/test.sh"),
        timeout_seconds=30,
        memory_bytes=256 << 20,
        disk_bytes=64 << 20,
        collect=("/app/written", "/logs/tmp-written", "/app/root-written", "/app/dev-written"),
    )
    result = backend.run(spec)
    assert result.limits == ("disk", "memory")
    assert int(result.files["/app/written"]) * 20 <= 64
    assert int(result.files["/logs/tmp-written"]) * 60 <= 256
    assert "/app/root-written" not in result.files
    assert "/app/dev-written" not in result.files
    runs = tmp_path / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []


def test_files_that_do_not_fit_the_quota_are_a_limit_not_a_crash(
    tmp_path: Path, backend: ContainerBackend
) -> None:
    limits = attrs.evolve(LIMITS, disk_mb=1)
    staged = TaskStaging(tmp_path / "tasks").stage(task())
    verdict = run_verifier(backend, staged, {"answer.txt": "5" * (3 << 20)}, limits)
    assert verdict.reward is None
    assert verdict.limit is not None
    assert "disk quota of 1 MiB" in verdict.limit


def test_a_tasks_own_storage_mb_lowers_the_quota(tmp_path: Path, backend: ContainerBackend) -> None:
    fill = "head -c 3M /dev/zero > /app/x && echo 1 > /logs/verifier/reward.txt\n"
    small = task("small", toml="[environment]\nstorage_mb = 2\n", test=fill)
    verdict = run_verifier(backend, TaskStaging(tmp_path / "tasks").stage(small), {}, LIMITS)
    assert verdict.reward is None
    assert verdict.limit is not None
    assert "disk quota of 2 MiB" in verdict.limit


def test_an_attempt_path_must_stay_in_the_working_folder(tmp_path: Path) -> None:
    staged = TaskStaging(tmp_path / "tasks").stage(task())
    with pytest.raises(ValueError, match=r"no '\.\.'"):
        run_verifier(open_backend(LIMITS), staged, {"../tests/test.sh": "x"}, LIMITS)


def test_the_docker_backend_asks_for_an_isolated_limited_container(tmp_path: Path) -> None:
    standin = _load_standin().DockerEngineStandIn(tmp_path, images=("python:3.12-slim",))
    with standin:
        docker = DockerBackend(standin.url, default_image="python:3.12-slim")
        staged = TaskStaging(tmp_path / "tasks").stage(task())
        assert run_oracle(docker, staged, LIMITS).reward == 1.0
        create = next(body for name, _, body in standin.calls if name == "create")
        host = create["HostConfig"]
        assert create["Image"] == "python:3.12-slim"
        assert create["NetworkDisabled"] is True
        assert host["NetworkMode"] == "none"
        assert host["Memory"] == host["MemorySwap"] == 256 << 20
        assert host["CapDrop"] == ["ALL"]
        assert create["User"] == "65534:65534"
        assert host["StorageOpt"] == {"size": str(LIMITS.disk_mb << 20)}
        assert host["Tmpfs"] == {"/tmp": f"rw,exec,nosuid,nodev,size={256 << 20},mode=1777"}
        assert host["ShmSize"] == 64 << 20
        assert host["LogConfig"] == {
            "Type": "json-file", "Config": {"max-size": "1m", "max-file": "2"}
        }  # fmt: skip
        assert [name for name, _, _ in standin.calls] == [
            "inspect_image", "create", "put_archive", "start", "wait", "logs", "inspect",
            "get_archive", "get_archive", "remove",
        ]  # fmt: skip
        assert standin.calls[-1][2] == {"force": "1", "v": "1"}
        # An image the daemon does not have fails the run as an infrastructure failure.
        other = TaskStaging(tmp_path / "tasks").stage(
            task("own-image", toml='[environment]\ndocker_image = "mine:1"\n')
        )
        with pytest.raises(ContainerError, match="No such image: mine:1"):
            run_oracle(docker, other, LIMITS)
        docker.close()


def test_the_docker_backend_builds_a_tasks_environment_dockerfile_once(tmp_path: Path) -> None:
    standin = _load_standin().DockerEngineStandIn(tmp_path, images=("python:3.12-slim",))
    dockerfile = "FROM python:3.12-slim\nRUN pip install numpy\nCOPY data/ /data/\n"
    with standin:
        docker = DockerBackend(standin.url, default_image="python:3.12-slim")
        staging = TaskStaging(tmp_path / "tasks")
        built = staging.stage(
            task("built", environment__Dockerfile=dockerfile, environment__data__a_txt="a\n")
        )
        assert run_oracle(docker, built, LIMITS).reward == 1.0
        tag = environment_tag({"Dockerfile": dockerfile, "data/a_txt": "a\n"})
        assert tag.startswith("reef-task-env:")
        assert standin.builds == {tag: {"Dockerfile": dockerfile, "data/a_txt": "a\n"}}
        names = [name for name, _, _ in standin.calls]
        assert names[:4] == ["inspect_image", "build", "inspect_image", "create"]
        create = next(body for name, _, body in standin.calls if name == "create")
        assert create["Image"] == tag
        # The daemon has the image now: the next run of the same environment builds nothing.
        standin.calls.clear()
        assert run_verifier(docker, built, {"answer.txt": "5"}, LIMITS).reward == 1.0
        assert [name for name, _, _ in standin.calls][:3] == [
            "inspect_image", "inspect_image", "create"
        ]  # fmt: skip
        # A task that names its image runs it, and one without an environment the default.
        named = staging.stage(
            task(
                "named",
                toml='[environment]\ndocker_image = "python:3.12-slim"\n',
                environment__Dockerfile="FROM python:3.12-slim\n",
            )
        )
        plain = staging.stage(task("plain"))
        for staged in (named, plain):
            standin.calls.clear()
            assert run_oracle(docker, staged, LIMITS).reward == 1.0
            assert standin.calls[1][0] == "create"
            assert standin.calls[1][2]["Image"] == "python:3.12-slim"
        docker.close()
        assert standin.unexpected == []


def test_a_failed_build_fails_the_run_with_the_builds_error(tmp_path: Path) -> None:
    standin = _load_standin().DockerEngineStandIn(tmp_path, images=("python:3.12-slim",))
    with standin:
        docker = DockerBackend(standin.url, default_image="python:3.12-slim")
        staged = TaskStaging(tmp_path / "tasks").stage(
            task("unbuildable", environment__Dockerfile="FROM nowhere:1\n")
        )
        with pytest.raises(ContainerError, match="pull access denied for nowhere:1"):
            run_oracle(docker, staged, LIMITS)
        assert "create" not in [name for name, _, _ in standin.calls]
        docker.close()


def test_the_docker_backend_keeps_an_images_volumes_off_the_hosts_disk(tmp_path: Path) -> None:
    standin = _load_standin().DockerEngineStandIn(tmp_path, images=("python:3.12-slim",))
    dockerfile = 'FROM python:3.12-slim\nVOLUME ["/data"]\nVOLUME /cache\n'
    with standin:
        docker = DockerBackend(standin.url, default_image="python:3.12-slim")
        staged = TaskStaging(tmp_path / "tasks").stage(
            task("volumes", environment__Dockerfile=dockerfile)
        )
        assert run_oracle(docker, staged, LIMITS).reward == 1.0
        create = next(body for name, _, body in standin.calls if name == "create")
        disk = f"rw,exec,nosuid,nodev,size={LIMITS.disk_mb << 20},mode=1777"
        assert create["HostConfig"]["Tmpfs"] == {
            "/tmp": f"rw,exec,nosuid,nodev,size={256 << 20},mode=1777",
            "/cache": disk,
            "/data": disk,
        }
        docker.close()


def test_a_docker_daemon_that_cannot_cap_the_disk_fails_every_run_saying_why(
    tmp_path: Path,
) -> None:
    module = _load_standin()
    standin = module.DockerEngineStandIn(
        tmp_path, images=("python:3.12-slim",), storage_quota=False
    )
    with standin:
        docker = DockerBackend(standin.url, default_image="python:3.12-slim")
        staged = TaskStaging(tmp_path / "tasks").stage(task())
        with pytest.raises(ContainerError, match=r"answered POST /containers/create with 500.*"
                           r"overlay over xfs.*cannot cap a container's disk"):  # fmt: skip
            run_oracle(docker, staged, LIMITS)
        assert "start" not in [name for name, _, _ in standin.calls]
        docker.close()


def test_a_bubblewrap_that_cannot_size_a_tmpfs_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # bubblewrap before 0.7 lists no --size in its --help; a setuid one refuses --size.
    old = tmp_path / "old" / "bwrap"
    old.parent.mkdir()
    old.write_text("#!/bin/sh\necho 'usage: bwrap [OPTIONS...] [--] COMMAND [ARGS...]'\n")
    old.chmod(0o755)
    real = shutil.which("prlimit")
    assert real is not None
    monkeypatch.setenv("PATH", f"{old.parent}:{Path(real).parent}")
    with pytest.raises(ContainerError, match=r"has no --size \(bubblewrap 0\.7 or later"):
        open_backend(LIMITS)
    setuid = tmp_path / "setuid" / "bwrap"
    setuid.parent.mkdir()
    setuid.write_text("#!/bin/sh\necho '    --size BYTES  Set size of next argument'\n")
    setuid.chmod(0o4755)
    monkeypatch.setenv("PATH", f"{setuid.parent}:{Path(real).parent}")
    with pytest.raises(ContainerError, match="is setuid, and a setuid bubblewrap refuses --size"):
        open_backend(LIMITS)
