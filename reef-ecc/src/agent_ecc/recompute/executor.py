"""The executor: one check on one patch, run for real in a fresh temporary workspace.

The repository snapshot is a ``git bundle`` kept in the content store under the check's
``image`` key: cloning it gives every run the same tree, history included, in a new folder.
The patch is applied as swebench's harness applies it (:func:`~agent_ecc.execution.apply_patch`:
three ``git apply`` strategies, then ``patch --fuzz=5``, the tree reset between them), each
attempt recorded in the :class:`~agent_ecc.records.Application` record, so that a patch that
does not apply (a fail) is told from an executor that stopped (no verdict, E-GRADE-4). The eval
script then runs with ``bash`` in the repository under a wall-clock timeout and, set in the
child before it executes, CPU, address-space, file-size and process limits; its environment is
built from scratch, and it runs in a new network namespace when the machine allows one.

The executor returns raw outputs (the log, the exit code, the run facts), never verdicts.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs

from agent_ecc.execution import ExecRequest, RawOutput, apply_patch, runtime_of, stopped_output
from agent_ecc.records import Application
from agent_ecc.store import ContentStore, StoreError

#: Ways to run a child without network, tried in order by :func:`network_isolation`.
_ISOLATIONS: Final = (("unshare", "--net", "--"), ("unshare", "-rn", "--"))
_GIT_TIMEOUT_S: Final = 60.0


class ExecutorError(RuntimeError):
    """The executor could not run (a missing snapshot, git unusable): never a verdict."""


def network_isolation() -> tuple[str, ...]:
    """The command prefix that runs a child in a new network namespace, or ``()`` when none
    works on this machine (the executor then runs with the host's network, and says so)."""
    for prefix in _ISOLATIONS:
        if shutil.which(prefix[0]) is None:
            continue
        try:
            probe = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if probe.returncode == 0:
            return prefix
    return ()


@attrs.frozen
class Limits:
    """What one eval script may use (its wall-clock limit is the check's ``timeout_s``).

    :ivar memory_mb: the address-space limit of every process of the script.
    :ivar processes: the process limit (``RLIMIT_NPROC``; the kernel ignores it for root).
    :ivar file_mb: the largest file the script may write.
    :ivar cpu_slack_s: CPU seconds allowed beyond the wall-clock timeout (the timeout kills first
        for a script that waits; the CPU limit stops one that forks busy children).
    :ivar log_bytes: the largest log kept; the rest is cut (and the cut is said in the log).
    """

    memory_mb: int = 2048
    processes: int = 512
    file_mb: int = 256
    cpu_slack_s: float = 5.0
    log_bytes: int = 4 * 1024 * 1024


def _limit_child(limits: Limits, cpu_s: int) -> None:
    # Runs in the child between fork and exec: only async-signal-safe-ish calls, no imports.
    mb = 1024 * 1024
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s))
    resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * mb, limits.memory_mb * mb))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_mb * mb, limits.file_mb * mb))
    resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


@attrs.frozen
class _Completed:
    output: bytes
    exit_code: int | None
    timed_out: bool
    seconds: float


def _run_group(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: dict[str, str],
    timeout_s: float,
    limits: Limits | None = None,
) -> _Completed:
    """Run ``argv`` in its own session; on timeout kill its whole process group."""
    start = time.monotonic()
    preexec = None
    if limits is not None:
        cpu = int(timeout_s + limits.cpu_slack_s) + 1

        def preexec() -> None:
            _limit_child(limits, cpu)

    process = subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=preexec,
    )
    try:
        output, _ = process.communicate(timeout=timeout_s)
        return _Completed(output, process.returncode, False, time.monotonic() - start)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        return _Completed(output, None, True, time.monotonic() - start)


class Executor:
    """Runs requests of SWE-bench-style checks of runtime ``git`` for real (see the module
    docstring).

    :param store: the content store holding snapshots, eval scripts and patches.
    :param limits: the eval script's resource limits.
    :param path: the ``PATH`` of the scrubbed environment; by default this interpreter's
        folder first (so ``python -m pytest`` is the one the service runs with), then the
        system's.
    :param isolate_network: ``True`` to run without network where the machine allows it.
    :param workroot: where fresh workspaces are made (the system's temporary folder).
    """

    runtime: Final = "git"

    def __init__(
        self,
        store: ContentStore,
        *,
        limits: Limits | None = None,
        path: str | None = None,
        isolate_network: bool = True,
        workroot: str | Path | None = None,
    ) -> None:
        self.store = store
        self.limits = limits or Limits()
        self.path = path or os.pathsep.join(
            [os.path.dirname(os.path.abspath(sys.executable)), "/usr/local/bin", "/usr/bin", "/bin"]
        )
        self.isolation = network_isolation() if isolate_network else ()
        self.workroot = None if workroot is None else str(workroot)

    @property
    def network(self) -> str:
        """How eval scripts are cut off the network (``"none"`` when they are not)."""
        return " ".join(self.isolation[:-1]) if self.isolation else "none"

    def _env(self, workspace: Path) -> dict[str, str]:
        # Nothing of the service's own environment leaks into the script (tokens, proxies).
        home = workspace / "home"
        tmp = workspace / "tmp"
        home.mkdir(exist_ok=True)
        tmp.mkdir(exist_ok=True)
        return {
            "PATH": self.path,
            "HOME": str(home),
            "TMPDIR": str(tmp),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_TERMINAL_PROMPT": "0",
        }

    def _command(
        self, argv: Sequence[str], cwd: Path, workspace: Path, *, evaluation: bool
    ) -> list[str]:
        """The command line that runs ``argv`` in ``cwd`` (the repository): a command applying
        the patch (``evaluation`` false) or the eval script. Here the eval script runs without
        network (:attr:`network`) and the patch's commands as they are; a subclass runs them
        somewhere else (:class:`~agent_ecc.recompute.bubblewrap.BubblewrapExecutor`)."""
        del cwd, workspace
        return [*self.isolation, *argv] if evaluation else list(argv)

    def _git(self, args: Sequence[str], cwd: Path, env: dict[str, str]) -> _Completed:
        return _run_group(["git", *args], cwd=cwd, env=env, timeout_s=_GIT_TIMEOUT_S)

    def _checkout(self, image: str, workspace: Path, env: dict[str, str]) -> Path:
        bundle = workspace / "snapshot.bundle"
        try:
            bundle.write_bytes(self.store.get_bytes(image))
        except StoreError as error:
            raise ExecutorError(f"repository snapshot: {error}") from None
        repo = workspace / "repo"
        done = self._git(["clone", "--quiet", str(bundle), str(repo)], workspace, env)
        if done.exit_code != 0:
            detail = done.output.decode(errors="replace").strip()
            raise ExecutorError(f"git clone of snapshot {image} failed: {detail}")
        return repo

    def _apply(self, patch: bytes, repo: Path, workspace: Path, env: dict[str, str]) -> Application:
        if not patch.strip():
            return Application(applied=True)  # the empty patch runs the unmodified tree
        patch_file = workspace / "model.patch"
        patch_file.write_bytes(patch)

        def run(argv: Sequence[str]) -> int | None:
            command = self._command(argv, repo, workspace, evaluation=False)
            try:
                done = _run_group(command, cwd=repo, env=env, timeout_s=_GIT_TIMEOUT_S)
            except FileNotFoundError:
                return 127  # what a shell answers for a command it cannot find
            return None if done.timed_out else done.exit_code

        return apply_patch(run, str(patch_file))

    def run(self, request: ExecRequest) -> RawOutput:
        """Execute ``request``: raw output and run facts, or a run whose executor stopped."""
        start = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="agent-ecc-run-", dir=self.workroot) as folder:
            workspace = Path(folder)
            env = self._env(workspace)
            try:
                if runtime_of(request.execution) != self.runtime:
                    raise ExecutorError(
                        f"a check of runtime {runtime_of(request.execution)} is not run by the "
                        f"git executor (ContainerExecutor runs runtime docker)"
                    )
                repo = self._checkout(str(request.execution["image"]), workspace, env)
                patch = self.store.get_bytes(request.patch)
                script = self.store.get_bytes(str(request.execution["eval_script"]))
            except (ExecutorError, StoreError) as error:
                duration = time.monotonic() - start
                return stopped_output(request.request_id, str(error), duration_s=duration)
            application = self._apply(patch, repo, workspace, env)
            if not application.applied:
                return RawOutput(
                    request.request_id,
                    log=None,
                    applied=False,
                    error=application.executor_error,
                    application=application,
                    duration_s=time.monotonic() - start,
                )
            script_file = workspace / "eval.sh"
            script_file.write_bytes(script)
            timeout_s = float(request.execution.get("timeout_s", 60.0))
            done = _run_group(
                self._command(["bash", str(script_file)], repo, workspace, evaluation=True),
                cwd=repo,
                env=env,
                timeout_s=timeout_s,
                limits=self.limits,
            )
            output = done.output
            if len(output) > self.limits.log_bytes:
                cut = len(output) - self.limits.log_bytes
                output = output[: self.limits.log_bytes] + f"\n[{cut} bytes cut]\n".encode()
            return RawOutput(
                request.request_id,
                log=output.decode(errors="replace"),
                applied=True,
                exit_code=done.exit_code,
                timed_out=done.timed_out,
                application=application,
                duration_s=time.monotonic() - start,
            )
