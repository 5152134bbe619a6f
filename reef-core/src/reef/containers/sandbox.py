"""The sandbox backend: a run in Linux namespaces on this machine, with bubblewrap.

For machines without a Docker daemon (development, CI, a small deployment). Each run gets a
fresh folder under the backend's root with the Harbor folders (``app``, ``tests``,
``solution``, ``logs``); bubblewrap (``bwrap``, Debian's ``bubblewrap`` package, which
``scripts/setup`` installs) then runs the command in new user, mount, PID, network, IPC and UTS
namespaces, where:

- the root file system holds only this machine's ``/usr`` (read-only; ``/bin``, ``/lib`` are
  its links), a fresh ``/proc``, ``/dev`` and ``/tmp``, and the run's four folders, of which
  ``/tests`` and ``/solution`` are read-only: nothing else of the host is there;
- the command runs as ``nobody`` (uid 65534) with an empty environment but ``PATH``,
  ``HOME=/app`` and the spec's ``env``;
- there is no network (only a loopback device of its own);
- limits are rlimits that ``prlimit`` sets before ``bwrap`` starts, so every process inherits
  them: address space (``memory_bytes``), CPU seconds (the timeout, rounded up), the size of any
  file written (``max_file_bytes``) and no core files; the wall-clock timeout kills the whole
  process group, and ``--die-with-parent`` takes the namespace's processes with it.

The task's image (``environment/Dockerfile``, ``[environment].docker_image``) is not built:
the command sees this machine's programs (``bash``, ``python3``, coreutils). Tasks that need
more run on the Docker backend (:mod:`reef.containers.docker`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO, Final

from reef.containers.interface import (
    FOLDERS,
    MAX_COLLECTED_BYTES,
    MAX_OUTPUT_BYTES,
    ContainerError,
    RunResult,
    RunSpec,
    container_path,
)

__all__ = ["BWRAP_HINT", "SandboxBackend", "SandboxProcess", "collect_files", "write_files"]

#: How to get bubblewrap, for the error of a machine without it.
BWRAP_HINT: Final = "install bubblewrap (apt-get install bubblewrap; scripts/setup does)"
_NOBODY: Final = "65534"
_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
#: Files of the host's /etc that programs need to start (the dynamic loader's cache and the
#: Debian alternatives that /usr/bin links through); nothing else of /etc is visible.
_ETC: Final = ("/etc/ld.so.cache", "/etc/alternatives")


class SandboxBackend:
    """Runs each :class:`RunSpec` under bubblewrap (see the module's documentation).

    :param root: the folder that holds the runs' folders while they run (a temporary folder
        when ``None``); each run's folder is removed when it ends.
    :param max_file_bytes: the largest file a run may write.
    :raises ContainerError: when ``bwrap`` is not installed.
    """

    name = "sandbox"

    def __init__(self, root: Path | None = None, *, max_file_bytes: int = 64 << 20) -> None:
        bwrap, prlimit = shutil.which("bwrap"), shutil.which("prlimit")
        if bwrap is None:
            raise ContainerError(f"the sandbox backend needs bubblewrap: {BWRAP_HINT}")
        if prlimit is None:
            raise ContainerError("the sandbox backend needs prlimit (Debian's util-linux)")
        self._bwrap, self._prlimit = bwrap, prlimit
        self._root = root
        self._max_file_bytes = max_file_bytes

    def run(self, spec: RunSpec) -> RunResult:
        """Run ``spec`` (see :class:`reef.containers.interface.ContainerBackend`)."""
        if self._root is not None:
            self._root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="run-", dir=self._root) as name:
            folder = Path(name)
            write_files(folder, spec.files)
            with (folder / "output").open("wb") as output:
                process = self.start(spec, folder, output)
                exit_code = process.wait(spec.timeout_seconds)
            return RunResult(
                exit_code,
                process.timed_out,
                _tail(folder / "output", MAX_OUTPUT_BYTES),
                collect_files(folder, spec.collect),
            )

    def start(self, spec: RunSpec, folder: Path, output: BinaryIO) -> SandboxProcess:
        """Start ``spec``'s command in ``folder``, a run's folder (:func:`write_files`), its
        output going to ``output``; the caller waits for it. ``spec.files`` are not written.

        :raises ContainerError: when the sandbox cannot start.
        """
        cpu_seconds = int(spec.timeout_seconds) + 1
        # prlimit (util-linux) sets the limits on itself and then becomes bwrap, so every
        # process of the run inherits them; no Python code runs between fork and exec.
        limits = [
            self._prlimit,
            f"--as={spec.memory_bytes}",
            f"--cpu={cpu_seconds}",
            f"--fsize={self._max_file_bytes}",
            "--core=0",
            "--",
        ]
        try:
            process = subprocess.Popen(
                [*limits, *self._command(spec, folder)],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            raise ContainerError(f"the sandbox could not start: {exc}") from exc
        return SandboxProcess(process)

    def _command(self, spec: RunSpec, folder: Path) -> list[str]:
        args = [self._bwrap, "--unshare-all", "--unshare-user", "--uid", _NOBODY, "--gid", _NOBODY]
        args += ["--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{link}"):
                args += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        for path in _ETC:
            args += ["--ro-bind-try", path, path]
        args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
        for top, writable in FOLDERS.items():
            args += ["--bind" if writable else "--ro-bind", str(folder / top), f"/{top}"]
        args += ["--chdir", spec.workdir, "--clearenv", "--setenv", "PATH", _PATH]
        args += ["--setenv", "HOME", "/app"]
        for key, value in spec.env.items():
            args += ["--setenv", key, value]
        return [*args, "--", *spec.command]


class SandboxProcess:
    """A started run's process."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self._process = process
        #: The run was killed by :meth:`wait`'s timeout or by :meth:`kill`.
        self.timed_out = False

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit code once it ends; past ``timeout`` seconds it is killed (``None``)."""
        try:
            return self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """Kill the run's whole process group (``--die-with-parent`` takes the rest)."""
        self.timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()


def write_files(folder: Path, files: Mapping[str, str]) -> None:
    """Make a run's folder: its four folders, and ``files`` in them (container paths)."""
    for top in FOLDERS:
        (folder / top).mkdir(exist_ok=True)
    for path, text in files.items():
        top, rest = container_path(path)
        target = folder / top / rest
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def _tail(path: Path, limit: int) -> str:
    with path.open("rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - limit))
        return file.read().decode("utf-8", errors="replace")


def collect_files(folder: Path, paths: tuple[str, ...]) -> Mapping[str, str]:
    """The files at ``paths`` (container paths) that a run left as regular files in its
    ``folder``. The command
    could have put a link in their place: a path that resolves outside the run's folder, or is
    not a regular file, is not read."""
    found: dict[str, str] = {}
    root = folder.resolve()
    for path in paths:
        top, rest = container_path(path, readable=True)
        host = (folder / top / rest).resolve()
        if not host.is_relative_to(root / top) or not host.is_file():
            continue
        try:
            fd = os.open(host, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as file:
            found[path] = file.read(MAX_COLLECTED_BYTES).decode("utf-8", errors="replace")
    return found
