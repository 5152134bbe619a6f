"""Harbor tasks as values: :class:`HarborTask`.

A generated task travels through Reef as a value, never as a folder that two processes must
share: the generator returns it, the task store keeps its JSON form, a :class:`TaskSample`
carries it into a job, and only the process that runs it writes it to disk (staging). Its
files follow the Harbor task layout, so a task moves between Reef and Harbor-based tooling
unchanged (``docs/decisions.md``):

- ``task.toml``: the task's configuration (timeouts, resources, metadata);
- ``instruction.md``: what the agent is asked to do;
- ``environment/``: the environment definition (a ``Dockerfile`` and its context), optional;
- ``tests/``: the verifier (``tests/test.sh`` writes the reward);
- ``solution/``: the oracle solution (``solution/solve.sh``), optional.

A task is checked when it is made: paths are relative POSIX paths that stay inside the task
folder, every file is UTF-8 text, and sizes are bounded, so that a task a generator (or a
designer model behind it) wrote can be staged safely. Nothing here touches the file system.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
import types
from collections.abc import Iterable, Mapping
from typing import Any, Final

import attrs

from reef.core.records import JSON
from reef.errors import ReefError

__all__ = [
    "MAX_FILES",
    "MAX_FILE_BYTES",
    "MAX_TASK_BYTES",
    "REQUIRED_FILES",
    "HarborTask",
    "HarborTaskError",
    "answer_file_name",
    "read_task_toml",
]

#: The files every task has.
REQUIRED_FILES: Final = ("task.toml", "instruction.md", "tests/test.sh")

#: The largest file a task may hold, in bytes of UTF-8.
MAX_FILE_BYTES: Final = 1 << 20
#: The most bytes all of a task's files may hold together.
MAX_TASK_BYTES: Final = 4 << 20
#: The most files a task may hold.
MAX_FILES: Final = 256

# A task's name is one folder name: it is staged as `<tasks root>/<name>/`.
_NAME: Final = re.compile(r"[a-z0-9][a-z0-9._-]{0,127}")
_SEGMENT: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,254}")


#: A file an agent leaves its answer in, in ``/app``: a plain name.
_ANSWER_FILE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")


def answer_file_name(_: object, __: attrs.Attribute[Any], value: str) -> None:
    """An attrs validator: ``value`` is a plain file name (an agent's ``answer_file``)."""
    if not _ANSWER_FILE.fullmatch(value):
        raise ValueError(f"answer_file {value!r} must be a plain file name, such as answer.txt")


class HarborTaskError(ReefError, ValueError):
    """A task that Reef cannot accept: the message names the task, the file and the reason."""


def read_task_toml(task: str, text: str) -> dict[str, Any]:
    """The document of a task's ``task.toml`` (``text``), read.

    A model writes these files, so any text is expected: invalid TOML, and TOML nested so
    deeply that the reader would exhaust the stack (tomllib reads nesting recursively), are
    both refused here, with the task and the file named.

    :raises HarborTaskError: when ``text`` is not a TOML document Reef can read.
    """
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HarborTaskError(f"task {task!r}: task.toml is not valid TOML: {exc}") from None
    except RecursionError:
        raise HarborTaskError(
            f"task {task!r}: task.toml has arrays or tables nested too deeply to read"
        ) from None


def _ids(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _check_name(_: object, __: attrs.Attribute[Any], name: str) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise HarborTaskError(
            f"task name {name!r} is not a folder name Reef stages: use lower-case letters, "
            "digits, '.', '_' and '-', starting with a letter or digit, at most 128 characters"
        )


def _check_path(task: str, path: object) -> str:
    if not isinstance(path, str) or not path:
        raise HarborTaskError(f"task {task!r}: a file path must be a non-empty string")
    segments = path.split("/")
    # Each segment is a plain name: no '', '.', '..', no backslash or drive, no hidden
    # dot-folder tricks; so a staged file can only land inside the task's folder.
    if any(not _SEGMENT.fullmatch(segment) for segment in segments):
        raise HarborTaskError(
            f"task {task!r}: file path {path!r} must be relative, '/'-separated, and made of "
            "plain names (letters, digits, '.', '_', '-'; no '..', no leading '.')"
        )
    return path


def _files(task: str, files: Mapping[str, str]) -> dict[str, str]:
    if len(files) > MAX_FILES:
        raise HarborTaskError(f"task {task!r} holds {len(files)} files; at most {MAX_FILES}")
    checked: dict[str, str] = {}
    total = 0
    for path, content in sorted(files.items()):
        _check_path(task, path)
        if not isinstance(content, str):
            raise HarborTaskError(f"task {task!r}: file {path!r} must be text (str)")
        try:
            size = len(content.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise HarborTaskError(f"task {task!r}: file {path!r} is not valid UTF-8") from exc
        if size > MAX_FILE_BYTES:
            raise HarborTaskError(
                f"task {task!r}: file {path!r} holds {size} bytes; at most {MAX_FILE_BYTES}"
            )
        total += size
        checked[path] = content
    if total > MAX_TASK_BYTES:
        raise HarborTaskError(f"task {task!r} holds {total} bytes; at most {MAX_TASK_BYTES}")
    # A file and a folder of one name cannot both be staged.
    folders = {path.rsplit("/", 1)[0] for path in checked if "/" in path}
    for folder in folders:
        parts = folder.split("/")
        for depth in range(1, len(parts) + 1):
            if "/".join(parts[:depth]) in checked:
                raise HarborTaskError(
                    f"task {task!r}: {'/'.join(parts[:depth])!r} is both a file and a folder"
                )
    missing = [path for path in REQUIRED_FILES if path not in checked]
    if missing:
        needed = ", ".join(missing)
        raise HarborTaskError(f"task {task!r} has no {needed} (a Harbor task needs them)")
    return checked


@attrs.frozen
class HarborTask:
    """One Harbor task: its name, its files, and the recorded calls it was made from.

    :ivar name: the task's name, unique in its task store and its staged folder's name.
    :ivar files: each file's path inside the task folder (``tests/test.sh``) and its text.
    :ivar source_agent_record_ids: the ids of the recorded calls the task was generated from
        (a generator keeps the request's source record ids here); empty for a task made from
        no recorded session.
    :raises HarborTaskError: when the name, a path, a file or a size is not acceptable.
    """

    name: str = attrs.field(validator=_check_name)
    files: Mapping[str, str] = attrs.field(hash=False)
    source_agent_record_ids: tuple[str, ...] = attrs.field(default=(), converter=_ids)

    @files.validator
    def _check_files(self, _: attrs.Attribute[Any], files: Mapping[str, str]) -> None:
        if not isinstance(files, Mapping):
            raise HarborTaskError(f"task {self.name!r}: files must map paths to text")
        # Keep the checked copy, in path order, so that equal tasks compare and serialise alike
        # and a caller's later change to its own dict cannot reach the task.
        object.__setattr__(self, "files", types.MappingProxyType(_files(self.name, files)))

    @property
    def instruction(self) -> str:
        """The text of ``instruction.md``."""
        return self.files["instruction.md"]

    def toml(self) -> dict[str, Any]:
        """The task's ``task.toml``, read (:func:`read_task_toml`).

        :raises HarborTaskError: when it is not a TOML document Reef can read.
        """
        return read_task_toml(self.name, self.files["task.toml"])

    def digest(self) -> str:
        """A hash of the task's files (not its name nor its sources): two tasks with equal
        digests ask the same thing and verify it the same way."""
        canonical = json.dumps(dict(self.files), sort_keys=True, ensure_ascii=False)
        return hashlib.sha256(canonical.encode("utf-8")).hexdigest()

    def to_json(self) -> JSON:
        """The task's JSON form, as a :class:`~reef.core.job_data.TaskSample` and the task
        store keep it."""
        return {
            "name": self.name,
            "files": dict(self.files),
            "source_agent_record_ids": list(self.source_agent_record_ids),
        }

    @classmethod
    def from_json(cls, value: Any) -> HarborTask:
        """Read a task back from :meth:`to_json`'s form.

        :raises HarborTaskError: naming what is wrong.
        """
        if not isinstance(value, Mapping):
            raise HarborTaskError(f"a task must be a JSON object, got {type(value).__name__}")
        unknown = set(value) - {"name", "files", "source_agent_record_ids"}
        if unknown:
            raise HarborTaskError(f"a task has no key {', '.join(sorted(unknown))}")
        sources = value.get("source_agent_record_ids", [])
        if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
            raise HarborTaskError("source_agent_record_ids must be a list of record ids")
        return cls(
            name=value.get("name"),  # type: ignore[arg-type]
            files=value.get("files"),  # type: ignore[arg-type]
            source_agent_record_ids=sources,
        )
