"""The container executor: a check's eval script run in its instance's container image.

For checks of runtime ``docker`` (SWE-bench's images: the repository at ``/testbed``, its
dependencies installed). Each request gets a fresh container of the check's ``image``, created
through the Docker Engine API with the ``docker`` package (``pip install 'reef-ecc[docker]'``),
never pulled: the images must be on the daemon already (``docker pull`` them, or build them with
SWE-bench's harness). The container runs a small runner script that applies the patch in the
check's ``workdir`` as swebench's harness does (:data:`~agent_ecc.execution.PATCH_STRATEGIES`,
in order, the tree reset between them, then the reverse check; each attempt in the
:class:`~agent_ecc.records.Application` record), then executes the eval script; its output
is the log. Nothing of this process's environment is passed into the container.

Limits (:class:`~agent_ecc.recompute.executor.Limits`, the git executor's): memory (``Memory``
with no swap beyond it), processes (``PidsLimit``), file size and CPU seconds (``Ulimits``), no
core files, no network (``NetworkMode: none``), no privilege gain (``no-new-privileges``), the
log cut at ``log_bytes``. The wall-clock limit covers the whole container: the check's
``timeout_s`` plus ``apply_timeout_s`` for applying the patch; when it passes the container is
killed and the run is timed out (a fail) if the eval script had started, else the executor
stopped (no verdict). The container is removed after every run.

Engine API calls, and no others (``tests/fixtures/docker_standin.py`` implements exactly
these): ``GET /version`` (the API version to speak), ``POST /containers/create``,
``PUT /containers/{id}/archive`` (the runner, the patch and the eval script, as a tar),
``POST /containers/{id}/start``, ``POST /containers/{id}/wait``, ``POST /containers/{id}/kill``
(at the wall-clock limit), ``GET /containers/{id}/json`` and ``GET /containers/{id}/logs``
(the output), ``DELETE /containers/{id}``. ``reef-ecc/scripts/docker-check`` runs the contract
tests against a real daemon.
"""

from __future__ import annotations

import io
import logging
import shlex
import tarfile
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from agent_ecc.execution import (
    PATCH_RESET,
    PATCH_STRATEGIES,
    REVERSE_CHECK,
    STRATEGY_NAMES,
    ExecRequest,
    RawOutput,
    runtime_of,
    stopped_output,
)
from agent_ecc.recompute.executor import ExecutorError, Limits
from agent_ecc.records import Application
from agent_ecc.store import ContentStore, StoreError

if TYPE_CHECKING:
    import docker

_log = logging.getLogger(__name__)

#: Where the runner, the patch and the eval script are put in the container.
RUN_DIR: Final = "/agent-ecc"
INSTALL_HINT: Final = "pip install 'reef-ecc[docker]'"


def _words(command: tuple[str, ...]) -> str:
    return " ".join(shlex.quote(word) for word in command)


# One attempt per strategy, in order, the tree reset before each after the first; the first
# that exits 0 applies the patch, else the reverse check on what the last one left decides.
_ATTEMPTS: Final = "\n".join(
    (f"  [ \"$applied\" -eq 1 ] || {{ {'reset; ' if index else ''}"
     f"attempt {shlex.quote(name)} {_words(strategy)}; }}")
    for index, (strategy, name) in enumerate(zip(PATCH_STRATEGIES, STRATEGY_NAMES, strict=True))
)  # fmt: skip
_RESET: Final = "; ".join(f"{_words(command)} >/dev/null 2>&1" for command in PATCH_RESET)
_REVERSE: Final = _words(REVERSE_CHECK)
#: The runner: reports each step on a line that starts with the run's marker (a random token
#: the patch cannot know in advance), then becomes the eval script.
RUNNER: Final = f"""#!/bin/bash
exec 2>&1
marker="$1"; workdir="$2"; here="$(cd "$(dirname "$0")" && pwd)"
cd "$workdir" || {{ echo "$marker stopped workdir $workdir is not in the image"; exit 0; }}
command -v git >/dev/null || {{ echo "$marker stopped git is not in the image"; exit 0; }}
reset() {{ {_RESET}; }}
attempt() {{
  name="$1"; shift
  "$@" "$here/model.patch" >/dev/null 2>&1; rc=$?
  echo "$marker step $rc $name"
  if [ "$rc" -gt 128 ]; then echo "$marker stopped $name was killed"; exit 0; fi
  if [ "$rc" -eq 0 ]; then applied=1; fi
}}
if grep -q '[^[:space:]]' "$here/model.patch"; then
  applied=0
{_ATTEMPTS}
  if [ "$applied" -eq 1 ]; then
    {_REVERSE} "$here/model.patch" >/dev/null 2>&1; echo "$marker reverse $?"
  else
    {_REVERSE} "$here/model.patch" >/dev/null 2>&1; rc=$?
    echo "$marker verify $rc"
    [ "$rc" -eq 0 ] || {{ echo "$marker not-applied"; exit 0; }}
  fi
fi
echo "$marker eval"
exec bash "$here/eval.sh"
"""


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        folder = tarfile.TarInfo(RUN_DIR.strip("/"))
        folder.type = tarfile.DIRTYPE
        folder.mode = 0o755
        archive.addfile(folder)
        for name, data in files.items():
            info = tarfile.TarInfo(f"{RUN_DIR.strip('/')}/{name}")
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _application(preamble: str, marker: str) -> Application:
    """The application record from the runner's marker lines (see :data:`RUNNER`)."""
    attempts: list[str] = []
    steps: list[str] = []
    reverse: bool | None = None
    stopped: str | None = None
    applied = True
    for line in preamble.splitlines():
        if not line.startswith(marker + " "):
            continue
        kind, _, rest = line[len(marker) + 1 :].partition(" ")
        if kind == "step":
            code, _, name = rest.partition(" ")
            attempts.append(name)
            steps.append(f"{name}: exit {code}")
        elif kind == "reverse":
            reverse = rest.strip() == "0"
        elif kind == "verify":  # every strategy failed; the reverse check decides
            steps.append(f"{' '.join(REVERSE_CHECK)}: exit {rest.strip()}")
            reverse = True if rest.strip() == "0" else None
        elif kind == "not-applied":
            applied = False
        elif kind == "stopped":
            stopped = rest
    if stopped is not None:
        return Application(
            applied=False, attempts=tuple(attempts), steps=tuple(steps), executor_error=stopped
        )
    return Application(
        applied=applied, attempts=tuple(attempts), steps=tuple(steps), reverse_check=reverse
    )


class ContainerExecutor:
    """Runs requests of runtime ``docker`` in containers (see the module docstring).

    :param store: the content store holding eval scripts and patches.
    :param base_url: the Docker daemon (``unix:///var/run/docker.sock``, ``tcp://...``); by
        default the environment's (``DOCKER_HOST`` and its TLS settings).
    :param limits: the git executor's limits, applied to the container.
    :param isolate_network: ``False`` to leave containers on the daemon's default network.
    :param apply_timeout_s: wall-clock seconds allowed for applying the patch, on top of the
        check's ``timeout_s``.
    """

    runtime: Final = "docker"

    def __init__(
        self,
        store: ContentStore,
        *,
        base_url: str | None = None,
        limits: Limits | None = None,
        isolate_network: bool = True,
        apply_timeout_s: float = 60.0,
    ) -> None:
        try:
            import docker
        except ImportError:
            raise ExecutorError(
                f"the container executor needs the docker package: {INSTALL_HINT}"
            ) from None
        self._docker = docker
        self.store = store
        self.base_url = base_url
        self.limits = limits or Limits()
        self.isolate_network = isolate_network
        self.apply_timeout_s = apply_timeout_s

    @property
    def network(self) -> str:
        """How eval scripts are cut off the network (``"none"`` when they are not)."""
        return "docker network_mode=none" if self.isolate_network else "none"

    def _client(self) -> docker.APIClient:
        # One client per run: cheap (no call before the first request), and nothing shared
        # between the service's threads.
        if self.base_url is not None:
            return self._docker.APIClient(base_url=self.base_url, version="auto")
        from docker.utils import kwargs_from_env

        return self._docker.APIClient(version="auto", **kwargs_from_env())

    def _create(
        self, api: docker.APIClient, request: ExecRequest, wall_s: float, marker: str
    ) -> str:
        mb = 1024 * 1024
        ulimit = self._docker.types.Ulimit
        cpu = int(wall_s + self.limits.cpu_slack_s) + 1
        host_config = api.create_host_config(
            mem_limit=self.limits.memory_mb * mb,
            memswap_limit=self.limits.memory_mb * mb,
            pids_limit=self.limits.processes,
            ulimits=[
                ulimit(name="cpu", soft=cpu, hard=cpu),
                ulimit(name="fsize", soft=self.limits.file_mb * mb, hard=self.limits.file_mb * mb),
                ulimit(name="core", soft=0, hard=0),
            ],
            network_mode="none" if self.isolate_network else None,
            security_opt=["no-new-privileges"],
        )
        try:
            created = api.create_container(
                str(request.execution["image"]),
                entrypoint=["bash"],
                # the marker and the workdir reach the runner as arguments
                command=[f"{RUN_DIR}/run.sh", marker, str(request.execution.get("workdir", "/"))],
                host_config=host_config,
                network_disabled=self.isolate_network,
                labels={"agent-ecc.request": request.request_id},
                use_config_proxy=False,  # the client's proxy settings are not the check's
            )
        except self._docker.errors.ImageNotFound:
            raise ExecutorError(
                f"image {request.execution['image']} is not on the Docker daemon: pull or build "
                "it first (the executor never pulls)"
            ) from None
        return str(created["Id"])

    def _output(self, api: docker.APIClient, container: str) -> bytes:
        # Read at most what is kept (the runner's lines, then log_bytes of the eval script's).
        cap = self.limits.log_bytes + 64 * 1024
        chunks: list[bytes] = []
        size = 0
        stream: Iterator[bytes] = api.logs(container, stdout=True, stderr=True, stream=True)
        for chunk in stream:
            chunks.append(chunk)
            size += len(chunk)
            if size > cap:
                break
        return b"".join(chunks)

    def _wait(self, api: docker.APIClient, container: str, wall_s: float) -> int | None:
        """The container's exit code, or None when it was killed at the wall-clock limit."""
        deadline = time.monotonic() + wall_s
        try:
            result = api.wait(container, timeout=max(1, int(wall_s) + 1))
            return int(result["StatusCode"])
        except Exception:
            if time.monotonic() < deadline - 1.0:
                raise  # the daemon failed, not the limit
        api.kill(container)
        return None

    def _execute(self, api: docker.APIClient, request: ExecRequest, marker: str) -> RawOutput:
        start = time.monotonic()
        if runtime_of(request.execution) != self.runtime:
            raise ExecutorError(
                f"a check of runtime {runtime_of(request.execution)} is not run in a container "
                "(Executor runs runtime git)"
            )
        try:
            patch = self.store.get_bytes(request.patch)
            script = self.store.get_bytes(str(request.execution["eval_script"]))
        except StoreError as error:
            raise ExecutorError(str(error)) from None
        timeout_s = float(request.execution.get("timeout_s", 60.0))
        wall_s = timeout_s + self.apply_timeout_s
        container = self._create(api, request, wall_s, marker)
        try:
            files = {"run.sh": RUNNER.encode(), "model.patch": patch, "eval.sh": script}
            api.put_archive(container, "/", _tar(files))
            api.start(container)
            exit_code = self._wait(api, container, wall_s)
            output = self._output(api, container)
        finally:
            try:
                api.remove_container(container, v=True, force=True)
            except Exception as error:  # a leaked container is the daemon's to clean, loudly
                _log.warning("could not remove container %s: %r", container, error)
        text = output.decode(errors="replace")
        head, found, log = text.partition(f"{marker} eval\n")
        application = _application(head, marker)
        duration = time.monotonic() - start
        if not found:
            reason = application.executor_error
            if exit_code is None:
                reason = "applying the patch did not finish in time"
            elif application.applied and reason is None:
                reason = f"the runner stopped before the eval script (exit {exit_code}): {head!r}"
            if reason is not None:
                application = Application(
                    applied=False,
                    attempts=application.attempts,
                    steps=application.steps,
                    executor_error=reason,
                )
            return RawOutput(
                request.request_id,
                log=None,
                applied=False,
                error=application.executor_error,
                application=application,
                duration_s=duration,
            )
        data = log.encode()
        if len(data) > self.limits.log_bytes:
            cut = len(data) - self.limits.log_bytes
            log = (data[: self.limits.log_bytes] + f"\n[{cut} bytes cut]\n".encode()).decode(
                errors="replace"
            )
        return RawOutput(
            request.request_id,
            log=log,
            applied=True,
            exit_code=exit_code,
            timed_out=exit_code is None,
            application=application,
            duration_s=duration,
        )

    def run(self, request: ExecRequest) -> RawOutput:
        """Execute ``request`` in a fresh container: raw output and run facts, or a run whose
        executor stopped (the image missing, the daemon failing)."""
        start = time.monotonic()
        marker = f"agent-ecc-{uuid.uuid4().hex}"
        try:
            api = self._client()
            try:
                return self._execute(api, request, marker)
            finally:
                api.close()
        except Exception as error:  # the daemon or its transport failed: never a verdict (I2)
            detail = str(error) if isinstance(error, ExecutorError) else repr(error)
            return stopped_output(request.request_id, detail, duration_s=time.monotonic() - start)
