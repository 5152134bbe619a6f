"""Staging: a task value written once as a folder under a tasks root, by its name.

The task store is the source of each task (P-TASK-26); a tasks root holds staged copies for
the runs that read them. :meth:`TaskStaging.stage` writes ``<root>/<task name>/`` the first
time and returns that copy every later time, so it is idempotent and cheap: rollouts that a
stop interrupted, or a process restarted with an empty tasks root, stage the saved task again
and run it.

A staged folder never holds anything but the task's files: the task's paths were checked when
it was made (:class:`~reef.core.harbor.HarborTask`: relative, plain names, bounded sizes), a
copy is written in a private folder beside the target, files are created new (never through an
existing link), and the finished folder is renamed into place in one step, with a digest mark
that says which task it holds. A different task under a staged name is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from reef.core.harbor import HarborTask, read_task_toml
from reef.errors import ReefError

__all__ = ["StagedTask", "StagingError", "TaskConfig", "TaskStaging", "folder_under"]

# A task's files are plain names that never start with '.', so the mark cannot be one of them.
_MARK: Final = ".reef-digest"


class StagingError(ReefError):
    """A task cannot be staged: another task holds its name, or its folder is not a task's."""


def _seconds(table: Mapping[str, Any], key: str, default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return default
    return float(value)


def _megabytes(table: Mapping[str, Any], key: str) -> int | None:
    value = table.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value


@attrs.frozen
class TaskConfig:
    """What a run needs of a task's ``task.toml`` (Harbor's keys; missing or bad values take
    the defaults): ``[verifier].timeout_sec``, ``[agent].timeout_sec``,
    ``[environment].docker_image``, ``[environment].memory_mb`` and
    ``[environment].storage_mb``."""

    verifier_timeout_seconds: float = 120.0
    agent_timeout_seconds: float = 300.0
    docker_image: str | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None

    @classmethod
    def parse(cls, task_name: str, text: str) -> TaskConfig:
        """Read ``task.toml``.

        :raises reef.core.harbor.HarborTaskError: when it is not a TOML document Reef can read
            (:func:`~reef.core.harbor.read_task_toml`).
        """
        document = read_task_toml(task_name, text)

        def table(name: str) -> Mapping[str, Any]:
            found = document.get(name)
            return found if isinstance(found, Mapping) else {}

        environment = table("environment")
        image = environment.get("docker_image")
        return cls(
            verifier_timeout_seconds=_seconds(table("verifier"), "timeout_sec", 120.0),
            agent_timeout_seconds=_seconds(table("agent"), "timeout_sec", 300.0),
            docker_image=image if isinstance(image, str) and image else None,
            memory_mb=_megabytes(environment, "memory_mb"),
            storage_mb=_megabytes(environment, "storage_mb"),
        )


def folder_under(root: Path, name: str) -> Path:
    """``root/name``, proven to be a folder of ``root`` itself: the one check of every path
    that joins a name (a task's, a scenario's) onto a folder Reef stages under.

    ``name`` must be one plain path segment: not empty, at most 255 bytes, no ``/``, ``\\`` or
    NUL (so never absolute, never two segments), not ``.`` or ``..``, and not starting with
    ``.`` (such names are Reef's own: ``.runs``, ``.stage-*``). ``root/name``, links resolved,
    must be ``root/name`` itself: a link there, even to a folder of ``root``, is refused.

    :raises StagingError: naming the name or the link, and what to do.
    """
    if (
        not name
        or len(name.encode("utf-8", errors="surrogatepass")) > 255
        or name.startswith(".")
        or any(character in name for character in "/\\\0")
    ):
        raise StagingError(
            f"{name!r} is not a folder name to stage under {root}: one plain name, without "
            "'/', '\\' or NUL, not starting with '.' (so never absolute, never '..')"
        )
    base = root.resolve()
    resolved = (base / name).resolve()
    if resolved != base / name:
        raise StagingError(
            f"{root / name} is a link to {resolved}: a folder Reef stages in is never a link; "
            "remove it"
        )
    return root / name


def _read(path: Path) -> str:
    # O_NOFOLLOW: a staged file is never a link (stage() creates each one new).
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, encoding="utf-8") as file:
        return file.read()


@attrs.frozen
class StagedTask:
    """A task's staged folder.

    :ivar name: the task's name.
    :ivar folder: ``<tasks root>/<name>``.
    :ivar digest: :meth:`HarborTask.digest` of the task it holds.
    """

    name: str
    folder: Path
    digest: str

    def files(self, under: str) -> dict[str, str]:
        """The text of each file under the task's folder ``under`` (``tests``, ``solution``),
        by its container path (``/tests/test.sh``)."""
        found: dict[str, str] = {}
        base = self.folder / under
        if not base.is_dir():
            return found
        for path in sorted(base.rglob("*")):
            if path.is_file() and not path.is_symlink():
                relative = path.relative_to(self.folder).as_posix()
                found[f"/{relative}"] = path.read_text(encoding="utf-8")
        return found

    def config(self) -> TaskConfig:
        """The task's ``task.toml``, read.

        :raises reef.core.harbor.HarborTaskError: when it is not a TOML document Reef can read.
        """
        return TaskConfig.parse(self.name, _read(self.folder / "task.toml"))

    def instruction(self) -> str:
        """The task's ``instruction.md``."""
        return _read(self.folder / "instruction.md")


class TaskStaging:
    """Stages tasks under ``root`` (created when first needed).

    Every task folder is :func:`folder_under` ``root``: a name that is not one plain folder
    name, or a link in a task's place, is refused before anything is read or written, so a
    caller that passes a name straight from a request (``../other-scenario/task``, an absolute
    folder holding a digest mark) reaches nothing outside ``root``.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def staged(self, name: str) -> StagedTask | None:
        """The staged copy of the task called ``name``, if there is one.

        :raises StagingError: when ``name`` is not a folder name under the root, or a link
            holds its place.
        """
        folder = folder_under(self.root, name)
        try:
            digest = _read(folder / _MARK).strip()
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:  # ELOOP: the mark is a link, so this is no staged copy
            raise StagingError(f"{folder} is not a staged task ({exc}): remove it") from None
        return StagedTask(name, folder, digest)

    def stage(self, task: HarborTask) -> StagedTask:
        """The staged copy of ``task``: the one already there, else a new one.

        :raises StagingError: when the name holds another task, or a folder that is not a
            staged task.
        :raises reef.core.harbor.HarborTaskError: when its ``task.toml`` cannot be read
            (nothing is staged).
        """
        digest = task.digest()
        task.toml()  # every run reads it: a task whose task.toml cannot be read is not staged
        found = self._check(task, digest)
        if found is not None:
            return found
        self.root.mkdir(parents=True, exist_ok=True)
        private = Path(tempfile.mkdtemp(prefix=f".stage-{task.name}-", dir=self.root))
        try:
            for path, text in task.files.items():
                target = private / path
                target.parent.mkdir(parents=True, exist_ok=True)
                # O_EXCL never writes through something already there (a link included).
                fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
                with os.fdopen(fd, "w", encoding="utf-8") as file:
                    file.write(text)
            (private / _MARK).write_text(digest, encoding="utf-8")
            private.chmod(0o755)
            try:
                private.rename(folder_under(self.root, task.name))
            except OSError:
                # Another stager finished first (or something else holds the name).
                found = self._check(task, digest)
                if found is None:
                    raise
                return found
        finally:
            if private.exists():
                shutil.rmtree(private)
        return StagedTask(task.name, folder_under(self.root, task.name), digest)

    def _check(self, task: HarborTask, digest: str) -> StagedTask | None:
        found = self.staged(task.name)
        if found is None:
            folder = folder_under(self.root, task.name)
            if folder.exists():
                raise StagingError(
                    f"{folder} is not a staged task: remove it to stage task {task.name!r} there"
                )
            return None
        if found.digest != digest:
            raise StagingError(
                f"task {task.name!r} is staged with other files (digest {found.digest[:12]}, "
                f"this task's {digest[:12]}): a task name stands for one task"
            )
        return found
