"""One container run, the interface both backends implement.

A *run* is the one container operation Reef needs: put files in a fresh container, run one
command there under a time and memory limit with no network, read a few files back, and throw
the container away. Running a task's verifier on an attempt, running its oracle solution, and
everything the generator service does are runs (:mod:`reef.containers.verify`).

The container's file system has the Harbor layout: ``/app`` is the working folder (the
agent's attempt goes there), ``/tests`` holds the verifier, ``/solution`` the oracle solution
and ``/logs`` what the run writes for Reef to read (``/logs/verifier/reward.txt``). A run's
files may only go under those four folders, and only files under ``/logs`` and ``/app`` are
read back, each at most :data:`MAX_COLLECTED_BYTES`.

A run is hostile until proven otherwise (a model writes generated tasks): it writes nowhere but
its own size-limited folders, so it can fill neither the host's disk nor its memory past its
limits (each backend's module says how: :mod:`reef.containers.sandbox`,
:mod:`reef.containers.docker`). A
run that fills one of them is reported so (:attr:`RunResult.limits`), and everything it wrote
is gone with its container.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Protocol

import attrs

from reef.errors import ReefError

__all__ = [
    "DEFAULT_DISK_BYTES",
    "FOLDERS",
    "LIMITS",
    "MAX_COLLECTED_BYTES",
    "MAX_OUTPUT_BYTES",
    "SHM_BYTES",
    "ContainerBackend",
    "ContainerError",
    "RunResult",
    "RunSpec",
]

#: The folders of a run's container that files go into, and whether the command may write there.
FOLDERS: Final[Mapping[str, bool]] = {"app": True, "logs": True, "tests": False, "solution": False}
#: The most bytes of output (stdout and stderr together, its end) a run's result keeps.
MAX_OUTPUT_BYTES: Final = 64 << 10
#: The most bytes of one file a run reads back.
MAX_COLLECTED_BYTES: Final = 64 << 10
#: The size of a run's ``/dev/shm``, a tmpfs counted against its memory (Docker's default).
SHM_BYTES: Final = 64 << 20
#: The limits a run can reach besides its time (:attr:`RunResult.limits`).
LIMITS: Final = ("disk", "memory")
#: A run's disk quota when its spec names none: what ``/app`` and ``/logs`` may each hold.
DEFAULT_DISK_BYTES: Final = 256 << 20

_SEGMENT: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,254}")


class ContainerError(ReefError):
    """A run could not happen (the backend is missing or failed), as opposed to a command that
    ran and failed: the caller treats it as an infrastructure failure."""


def container_path(path: str, *, readable: bool = False) -> tuple[str, str]:
    """Split an absolute container path into its top folder and the path inside it.

    :param readable: the path is read back after a run: only ``/app`` and ``/logs`` may be.
    :raises ValueError: for a path outside :data:`FOLDERS`, or with ``..`` or odd segments.
    """
    if not path.startswith("/") or posixpath.normpath(path) != path:
        raise ValueError(f"container path {path!r} must be absolute and normal (no '..')")
    top, _, rest = path[1:].partition("/")
    allowed = [name for name, writable in FOLDERS.items() if writable or not readable]
    if top not in allowed or not rest:
        folders = ", ".join(f"/{name}/" for name in allowed)
        raise ValueError(f"container path {path!r} must lie under {folders}")
    if any(not _SEGMENT.fullmatch(segment) for segment in rest.split("/")):
        raise ValueError(f"container path {path!r} has a segment that is not a plain name")
    return top, rest


def _check_files(_: object, __: attrs.Attribute[Any], files: Mapping[str, str]) -> None:
    for path in files:
        container_path(path)


def _check_collect(_: object, __: attrs.Attribute[Any], paths: tuple[str, ...]) -> None:
    for path in paths:
        container_path(path, readable=True)


def _check_environment(_: object, __: attrs.Attribute[Any], files: Mapping[str, str]) -> None:
    for path in files:
        if any(not _SEGMENT.fullmatch(segment) for segment in path.split("/")):
            raise ValueError(
                f"environment path {path!r} must be relative, of plain names (no '..')"
            )


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _positive(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen
class RunSpec:
    """What one run does.

    :ivar files: text files to put in the container before the command runs, by absolute
        container path (``/app/answer.txt``, ``/tests/test.sh``).
    :ivar command: the command, as arguments (``("bash", "/tests/test.sh")``).
    :ivar timeout_seconds: wall-clock limit; the run is killed when it passes.
    :ivar memory_bytes: the memory the run may take: each of its processes, and ``/tmp``
        (a tmpfs, RAM) together with them where the backend can pool them (Docker's memory
        cgroup), else on its own (the sandbox's tmpfs of this size).
    :ivar disk_bytes: the run's disk quota: what it may write outside ``/tmp`` (the sandbox:
        ``/app`` and ``/logs``, a tmpfs each of this size; Docker: the container's layer).
    :ivar collect: container paths under ``/app`` or ``/logs`` to read back after the run.
    :ivar image: the container image (the Docker backend's; the sandbox runs this machine's
        read-only system instead). ``None``: the image ``environment`` builds, else the
        backend's default image.
    :ivar environment: the task's ``environment/`` folder, by path inside it
        (``Dockerfile``): the build context the Docker backend builds the run's image from
        when ``image`` is ``None`` and it holds a ``Dockerfile``. The sandbox ignores it.
    :ivar workdir: the folder the command starts in.
    :ivar env: environment variables of the command (nothing else is passed in).
    """

    files: Mapping[str, str] = attrs.field(validator=_check_files)
    command: tuple[str, ...] = attrs.field(converter=_strings)
    timeout_seconds: float = attrs.field(validator=_positive)
    memory_bytes: int = attrs.field(validator=_positive)
    disk_bytes: int = attrs.field(default=DEFAULT_DISK_BYTES, validator=_positive)
    collect: tuple[str, ...] = attrs.field(default=(), converter=_strings, validator=_check_collect)
    image: str | None = None
    environment: Mapping[str, str] = attrs.field(factory=dict, validator=_check_environment)
    workdir: str = "/app"
    env: Mapping[str, str] = attrs.field(factory=dict)


@attrs.frozen
class RunResult:
    """How a run went.

    :ivar exit_code: the command's exit code; ``None`` when it was killed (time limit).
    :ivar timed_out: the run passed its ``timeout_seconds`` and was killed.
    :ivar output: the end of its stdout and stderr, at most :data:`MAX_OUTPUT_BYTES`.
    :ivar files: each collected path that existed as a regular file, with its text (none
        when the run was killed).
    :ivar limits: the limits the run reached, of :data:`LIMITS`, in that order: ``disk``
        (its disk quota was full: writing more failed) and ``memory`` (its memory was: ``/tmp``
        full, or the kernel's out-of-memory killer ended a process).
    """

    exit_code: int | None
    timed_out: bool
    output: str
    files: Mapping[str, str] = attrs.field(factory=dict)
    limits: tuple[str, ...] = ()


class ContainerBackend(Protocol):
    """Runs :class:`RunSpec` values: the sandbox here, Docker in production."""

    #: The backend's name, as ``sandbox.backend`` settings give it.
    name: str

    def run(self, spec: RunSpec) -> RunResult:
        """Run ``spec`` in a fresh container and remove the container.

        :raises ContainerError: when the run could not happen at all.
        """
