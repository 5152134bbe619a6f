"""The sandbox backend: a run in Linux namespaces on this machine, with bubblewrap.

For machines without a Docker daemon (development, CI, a small deployment). bubblewrap
(``bwrap`` 0.7 or later, for ``--size``, and not setuid, which refuses it: Debian's
``bubblewrap`` package, which ``scripts/setup`` installs) runs a run's command, under a small
launcher, in new user, mount, PID, network, IPC and UTS namespaces, where:

- the root file system holds only this machine's ``/usr`` (read-only; ``/bin``, ``/lib`` are
  its links), a fresh ``/proc`` and ``/dev``, and the run's folders; ``/`` and ``/dev``
  themselves are read-only, so nothing can be written there;
- ``/app`` and ``/logs`` are a tmpfs each of the run's disk quota (``disk_bytes``), ``/tmp`` a
  tmpfs of its memory (``memory_bytes``) and ``/dev/shm`` one of
  :data:`~reef.containers.interface.SHM_BYTES`: the kernel refuses a write past any of them
  (``No space left on device``), and all of them vanish with the namespace when the run ends;
- ``/tests``, ``/solution`` and the run's ``/app`` and ``/logs`` files are read-only binds of
  a folder under the backend's root, which only Reef writes (at most the task's own size);
- the command runs as ``nobody`` (uid 65534) with an empty environment but ``PATH``,
  ``HOME=/app`` and the spec's ``env``; the launcher is the namespace's PID 1, which no
  process of the run can kill: it copies the run's files into ``/app`` and ``/logs``, runs the
  command in its working folder, kills every process the command left, and reports the
  collected files and the folders the run filled;
- there is no network (only a loopback device of its own);
- limits are rlimits that ``prlimit`` sets before ``bwrap`` starts, so every process inherits
  them: address space (``memory_bytes``), CPU seconds (the timeout, rounded up), the size of any
  file written (``max_file_bytes``) and no core files; the wall-clock timeout kills the whole
  process group, and ``--die-with-parent`` takes the namespace's processes with it;
- the run's output (its stderr) and the launcher's report (its stdout) come through pipes,
  read as they come: the last :data:`~reef.containers.interface.MAX_OUTPUT_BYTES` of the
  output and the report's first bytes are kept, so nothing the run prints reaches a disk.

What the sandbox cannot do without cgroups: pool memory. ``memory_bytes`` bounds each process's
address space and, separately, ``/tmp``; the Docker backend's memory cgroup bounds them
together. Nor does bubblewrap bound how many files a tmpfs holds (only its bytes): each empty
file costs the kernel some memory, so a task that may create millions of them belongs on the
Docker backend, whose memory cgroup charges that memory to the container.

The task's image (``environment/Dockerfile``, ``[environment].docker_image``) is not built:
the command sees this machine's programs (``bash``, ``python3``, coreutils). Tasks that need
more run on the Docker backend (:mod:`reef.containers.docker`).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Final

import attrs

from reef.containers.interface import (
    MAX_COLLECTED_BYTES,
    MAX_OUTPUT_BYTES,
    SHM_BYTES,
    ContainerError,
    RunResult,
    RunSpec,
    container_path,
)

__all__ = [
    "BWRAP_HINT",
    "INPUTS",
    "Report",
    "SandboxBackend",
    "SandboxProcess",
    "run_folders",
    "write_inputs",
]

#: How to get bubblewrap, for the error of a machine without it.
BWRAP_HINT: Final = "install bubblewrap (apt-get install bubblewrap; scripts/setup does)"
#: Where the run's ``/app`` and ``/logs`` files wait, read-only, for the launcher to copy them.
INPUTS: Final = "/.reef-in"
_NOBODY: Final = "65534"
_PATH: Final = "/usr/local/bin:/usr/bin:/bin"
#: Files of the host's /etc that programs need to start (the dynamic loader's cache and the
#: Debian alternatives that /usr/bin links through); nothing else of /etc is visible.
_ETC: Final = ("/etc/ld.so.cache", "/etc/alternatives")
#: The folders the run writes whose limit is its disk quota; the others are its memory's.
_DISK: Final = ("/app", "/logs")

# The launcher, the namespace's PID 1 (no process of the run can kill it): it copies the
# inputs into the tmpfs folders, runs the command ($2...) in the working folder ($1) with its
# stdout sent to stderr, kills every process left, and writes the report on fd 3 (its stdout):
# each collected path that is a regular file reached without a link, each folder the run
# filled, and, when asked, a tar of /app and /logs. Collected paths and folders are plain
# names (container_path), quoted all the same.
_LAUNCHER: Final = """\
exec 3>&1 1>&2
workdir=$1
shift
code=125
copied=1
for top in app logs; do
  if [ -d {inputs}/$top ] && ! cp -R {inputs}/$top/. /$top/; then copied=0; fi
done
if [ "$copied" = 1 ]; then
  if cd "$workdir"; then "$@" 3>&- </dev/null; code=$?; else code=126; fi
else
  printf 'copy-failed\\n' >&3
fi
kill -9 -1 2>/dev/null
for path in {collect}; do
  if [ -f "$path" ] && [ "$(readlink -f "$path")" = "$path" ]; then
    size=$(( $(head -c {most} "$path" | wc -c) ))
    printf 'file %s %s\\n' "$path" "$size" >&3
    head -c {most} "$path" >&3
  fi
done
for top in {folders}; do
  free=$(df -Pk "$top" 2>/dev/null | {{ read -r _; read -r _ _ _ free _; echo "$free"; }})
  if [ "$free" = 0 ]; then printf 'full %s\\n' "$top" >&3; fi
done
{dump}exit "$code"
"""
_DUMP: Final = "printf 'dump\\n' >&3; tar -C / -cf - app logs >&3 2>/dev/null\n"


def run_folders(spec: RunSpec) -> dict[str, int]:
    """The folders ``spec``'s run may write, each a tmpfs of this many bytes: ``/app`` and
    ``/logs`` of its disk quota, ``/tmp`` of its memory, ``/dev/shm`` of :data:`SHM_BYTES`."""
    return {
        **dict.fromkeys(_DISK, spec.disk_bytes),
        "/tmp": spec.memory_bytes,
        "/dev/shm": SHM_BYTES,
    }


def write_inputs(folder: Path, files: Mapping[str, str]) -> dict[str, Path]:
    """Write a run's files (by container path) into ``folder`` as the read-only folders the
    sandbox binds: ``/tests`` and ``/solution`` as they are, the ``/app`` and ``/logs`` files
    under :data:`INPUTS` (for the launcher to copy). Returns the bind of each, by container
    path; every folder is there, empty or not."""
    binds = {"/tests": folder / "tests", "/solution": folder / "solution", INPUTS: folder / "in"}
    for host in binds.values():
        host.mkdir(exist_ok=True)
    for path, text in files.items():
        top, rest = container_path(path)
        target = (binds[INPUTS] / top if f"/{top}" in _DISK else binds[f"/{top}"]) / rest
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    return binds


@attrs.frozen
class Report:
    """What a run's launcher reported.

    :ivar files: each collected path that was a regular file, with its text.
    :ivar filled: the writable folders the run filled (``/app``, ``/tmp``, ...).
    :ivar copied: whether the run's files could be put in ``/app`` and ``/logs``.
    :ivar dump: the tar of ``/app`` and ``/logs`` when one was asked for.
    """

    files: Mapping[str, str] = attrs.field(factory=dict)
    filled: tuple[str, ...] = ()
    copied: bool = True
    dump: bytes = b""


def _read_report(data: bytes, collect: tuple[str, ...], folders: Sequence[str]) -> Report:
    """The report in ``data``: only the paths the run collects and its own folders are taken;
    anything else ends the reading (the run may have written to the launcher's stdout)."""
    files: dict[str, str] = {}
    filled: list[str] = []
    copied = True
    offset = 0
    while (end := data.find(b"\n", offset)) >= 0:
        words = data[offset:end].decode("ascii", errors="replace").split(" ")
        offset = end + 1
        size = int(words[2]) if len(words) == 3 and words[2].isdigit() else -1
        if words == ["copy-failed"]:
            copied = False
        elif words == ["dump"]:
            return Report(files, tuple(filled), copied, data[offset:])
        elif len(words) == 2 and words[0] == "full" and words[1] in folders:
            filled.append(words[1])
        elif (
            words[0] == "file"
            and words[1:2]
            and words[1] in collect
            and 0 <= size <= len(data) - offset
            and size <= MAX_COLLECTED_BYTES
        ):
            files[words[1]] = data[offset : offset + size].decode("utf-8", errors="replace")
            offset += size
        else:
            break
    return Report(files, tuple(filled), copied)


class _Reader(threading.Thread):
    """Reads a pipe to its end, keeping its first (``head``) or last bytes, at most
    ``limit``; the rest is read and dropped, so the writer never blocks on a full pipe."""

    def __init__(self, pipe: IO[bytes], limit: int, *, head: bool) -> None:
        super().__init__(daemon=True)
        self._pipe, self._limit, self._head = pipe, limit, head
        self.data = bytearray()

    def run(self) -> None:
        with self._pipe:
            while chunk := os.read(self._pipe.fileno(), 1 << 16):
                if self._head:
                    self.data += chunk[: max(0, self._limit - len(self.data))]
                else:
                    self.data += chunk
                    del self.data[: max(0, len(self.data) - self._limit)]


class SandboxBackend:
    """Runs each :class:`RunSpec` under bubblewrap (see the module's documentation).

    :param root: the folder that holds the runs' read-only inputs while they run (a temporary
        folder when ``None``); each run's folder is removed when it ends. A run writes nothing
        there: what it writes lives in its tmpfs folders.
    :param max_file_bytes: the largest file a run may write.
    :raises ContainerError: when ``bwrap`` is not installed, too old for ``--size``, or
        setuid (which refuses ``--size``).
    """

    name = "sandbox"

    def __init__(self, root: Path | None = None, *, max_file_bytes: int = 64 << 20) -> None:
        bwrap, prlimit = shutil.which("bwrap"), shutil.which("prlimit")
        if bwrap is None:
            raise ContainerError(f"the sandbox backend needs bubblewrap: {BWRAP_HINT}")
        if prlimit is None:
            raise ContainerError("the sandbox backend needs prlimit (Debian's util-linux)")
        usage = subprocess.run([bwrap, "--help"], capture_output=True, text=True, check=False)
        if "--size" not in usage.stdout + usage.stderr:
            raise ContainerError(
                f"{bwrap} has no --size (bubblewrap 0.7 or later sizes a run's tmpfs folders): "
                f"{BWRAP_HINT}"
            )
        if os.stat(bwrap).st_mode & stat.S_ISUID:
            raise ContainerError(
                f"{bwrap} is setuid, and a setuid bubblewrap refuses --size, which sizes a run's "
                "tmpfs folders: use one that is not (Debian's is not; it needs unprivileged "
                "user namespaces)"
            )
        self._bwrap, self._prlimit = bwrap, prlimit
        self._root = root
        self._max_file_bytes = max_file_bytes

    def run(self, spec: RunSpec) -> RunResult:
        """Run ``spec`` (see :class:`reef.containers.interface.ContainerBackend`).

        :raises ContainerError: when the run could not start, or its files could not be put
            in ``/app`` and ``/logs`` for another reason than its disk quota.
        """
        if self._root is not None:
            self._root.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="run-", dir=self._root) as name:
            process = self.start(
                spec.command,
                inputs=write_inputs(Path(name), spec.files),
                folders=run_folders(spec),
                workdir=spec.workdir,
                env=spec.env,
                memory_bytes=spec.memory_bytes,
                cpu_seconds=int(spec.timeout_seconds) + 1,
                collect=spec.collect,
            )
            exit_code = process.wait(spec.timeout_seconds)
            report = process.report()
        disk = any(top in _DISK for top in report.filled)
        if not report.copied and not disk:
            raise ContainerError(f"the run's files could not be put in /app and /logs: "
                                 f"{process.output()[-500:]}")  # fmt: skip
        memory = any(top not in _DISK for top in report.filled)
        limits = tuple(name for name, hit in (("disk", disk), ("memory", memory)) if hit)
        files = {} if process.timed_out else report.files
        return RunResult(exit_code, process.timed_out, process.output(), files, limits)

    def start(
        self,
        command: Sequence[str],
        *,
        inputs: Mapping[str, Path],
        folders: Mapping[str, int],
        workdir: str,
        env: Mapping[str, str],
        memory_bytes: int,
        cpu_seconds: int,
        collect: tuple[str, ...] = (),
        dump: bool = False,
    ) -> SandboxProcess:
        """Start ``command`` in a new sandbox; the caller waits for it.

        :param inputs: the read-only folders of the sandbox (``/tests``, :data:`INPUTS`, ...),
            each a folder of this machine (:func:`write_inputs`).
        :param folders: the writable folders, each a tmpfs of this many bytes
            (:func:`run_folders`).
        :param collect: the container paths the report holds, when they are regular files.
        :param dump: also report a tar of ``/app`` and ``/logs`` (the Docker stand-in's
            writable layer).
        :raises ContainerError: when the sandbox cannot start.
        """
        script = _LAUNCHER.format(
            inputs=INPUTS,
            collect=" ".join(shlex.quote(path) for path in collect) or "''",
            most=MAX_COLLECTED_BYTES,
            folders=" ".join(folders),
            dump=_DUMP if dump else "",
        )
        # prlimit (util-linux) sets the limits on itself and then becomes bwrap, so every
        # process of the run inherits them; no Python code runs between fork and exec.
        limits = [
            self._prlimit,
            f"--as={memory_bytes}",
            f"--cpu={cpu_seconds}",
            f"--fsize={self._max_file_bytes}",
            "--core=0",
            "--",
        ]
        launcher = ["/bin/sh", "-c", script, "reef-run", workdir, *command]
        try:
            process = subprocess.Popen(
                [*limits, *self._command(inputs, folders, env), *launcher],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            raise ContainerError(f"the sandbox could not start: {exc}") from exc
        most = len(collect) * (MAX_COLLECTED_BYTES + 512) + 1024
        if dump:
            most += 2 * sum(folders[top] for top in _DISK if top in folders) + (1 << 20)
        return SandboxProcess(process, collect, tuple(folders), most)

    def _command(
        self, inputs: Mapping[str, Path], folders: Mapping[str, int], env: Mapping[str, str]
    ) -> list[str]:
        args = [self._bwrap, "--unshare-all", "--unshare-user", "--uid", _NOBODY, "--gid", _NOBODY]
        args += ["--die-with-parent", "--new-session", "--as-pid-1", "--ro-bind", "/usr", "/usr"]
        for link in ("bin", "lib", "lib64", "sbin"):
            if os.path.islink(f"/{link}"):
                args += ["--symlink", os.readlink(f"/{link}"), f"/{link}"]
        for path in _ETC:
            args += ["--ro-bind-try", path, path]
        args += ["--proc", "/proc", "--dev", "/dev"]
        for path, size in folders.items():
            args += ["--size", str(size), "--tmpfs", path]
        for path, host in inputs.items():
            args += ["--ro-bind", str(host), path]
        # Nothing else is writable: bwrap's own root and /dev are tmpfs folders without a size.
        args += ["--remount-ro", "/dev", "--remount-ro", "/"]
        args += ["--chdir", "/", "--clearenv", "--setenv", "PATH", _PATH]
        args += ["--setenv", "HOME", "/app"]
        for key, value in env.items():
            args += ["--setenv", key, value]
        return [*args, "--"]


class SandboxProcess:
    """A started sandbox: its process, the end of its output and its launcher's report."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        collect: tuple[str, ...],
        folders: tuple[str, ...],
        report_bytes: int,
    ) -> None:
        assert process.stdout is not None
        assert process.stderr is not None
        self._process = process
        self._collect, self._folders = collect, folders
        self._report = _Reader(process.stdout, report_bytes, head=True)
        self._output = _Reader(process.stderr, MAX_OUTPUT_BYTES, head=False)
        self._report.start()
        self._output.start()
        #: The run was killed by :meth:`wait`'s timeout or by :meth:`kill`.
        self.timed_out = False

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit code once it ends; past ``timeout`` seconds it is killed (``None``)."""
        try:
            code: int | None = self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            code = None
        # The namespace ends with its PID 1, so the pipes close with it.
        self._report.join()
        self._output.join()
        return code

    def kill(self) -> None:
        """Kill the run's whole process group (``--die-with-parent`` takes the rest)."""
        self.timed_out = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()

    def output(self) -> str:
        """The end of the run's output (after :meth:`wait`)."""
        return bytes(self._output.data).decode("utf-8", errors="replace")

    def report(self) -> Report:
        """The launcher's report (after :meth:`wait`)."""
        return _read_report(bytes(self._report.data), self._collect, self._folders)
