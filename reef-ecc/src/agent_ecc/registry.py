"""The registry of a run: grader versions, worlds, the publication log, epochs and pins.

One registry per run, in a folder every component sees (E-REG-1). Publications are atomic and
ordered; a seal reads the pointer (the log's last entry) once; :meth:`DirectoryRegistry.epoch_at`
answers from the log which epoch was in force at a time (E-REG-4). Contract section 1.
"""

from __future__ import annotations

import fcntl
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import attrs

from agent_ecc.digests import canonical_json
from agent_ecc.durable import create_exclusive, write_atomic
from agent_ecc.versions import (
    GraderVersion,
    VersionError,
    World,
    version_from_body,
    version_to_body,
)


class RegistryError(RuntimeError):
    """A publication or read the registry refuses (nothing published, an uncovered world, ...)."""


@attrs.frozen
class Epoch:
    """One publication of a grader version; ordered by ``index`` (0: the startup epoch)."""

    index: int
    version_id: str
    published_at: float
    source: str


@attrs.frozen
class Publication:
    """One entry of the publication log."""

    seq: int
    kind: Literal["grader", "world"]
    name: str
    published_at: float
    source: str
    epoch: Epoch
    world: str | None


@attrs.frozen
class PointerRead:
    """What one read of the pointer saw: the last publication and when it was read."""

    seq: int
    read_at: float
    epoch: Epoch
    world: str | None


@attrs.frozen
class Pin:
    """What a trajectory was started with: the world its sandbox serves and the epoch grading it."""

    world: str
    epoch: Epoch


def _publication_from_body(body: dict[str, Any]) -> Publication:
    return Publication(
        seq=body["seq"],
        kind=body["kind"],
        name=body["name"],
        published_at=body["published_at"],
        source=body["source"],
        epoch=Epoch(**body["epoch"]),
        world=body["world"],
    )


class DirectoryRegistry:
    """A registry kept in folder ``path``, shared by every process of a run.

    ``clock`` gives publication and read times (seconds); tests and replays pass their own.
    """

    def __init__(self, path: str | Path, *, clock: Callable[[], float] = time.time) -> None:
        self.path = Path(path)
        self.clock = clock
        for sub in ("versions", "worlds", "log"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)
        self._versions: dict[str, GraderVersion] = {}

    # -- locking: a publication's time and its log entry are one step for every reader.
    @contextmanager
    def _locked(self, exclusive: bool) -> Iterator[None]:
        with open(self.path / "lock", "a+b") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _log_entries(self) -> list[Publication]:
        names = sorted(p.name for p in (self.path / "log").iterdir() if p.name.endswith(".json"))
        return [
            _publication_from_body(json.loads((self.path / "log" / n).read_text())) for n in names
        ]

    def publications(self) -> list[Publication]:
        """The publication log, oldest first, with times and sources."""
        with self._locked(exclusive=False):
            return self._log_entries()

    def _append(self, kind: Literal["grader", "world"], name: str, source: str) -> Publication:
        with self._locked(exclusive=True):
            log = self._log_entries()
            last = log[-1] if log else None
            now = self.clock()
            if kind == "grader":
                index = last.epoch.index + 1 if last else 0
                epoch = Epoch(index=index, version_id=name, published_at=now, source=source)
                world = last.world if last else None
            else:
                if last is None:
                    raise RegistryError("publish a grader before the world it covers (E-REG-1)")
                epoch, world = last.epoch, name
            entry = Publication(
                seq=len(log),
                kind=kind,
                name=name,
                published_at=now,
                source=source,
                epoch=epoch,
                world=world,
            )
            body = attrs.asdict(entry)
            if not create_exclusive(
                self.path / "log" / f"{entry.seq:010d}.json", canonical_json(body).encode()
            ):
                raise RegistryError(f"log entry {entry.seq} taken by another publisher")
            return entry

    def _put_body(self, folder: str, name: str, body: dict[str, Any]) -> None:
        path = self.path / folder / f"{name}.json"
        data = canonical_json(body).encode()
        if path.exists():
            if path.read_bytes() != data:
                raise RegistryError(
                    f"{folder[:-1]} {name!r} is already published with another body"
                )
            return
        write_atomic(path, data)

    def publish_grader(self, version: GraderVersion, *, source: str) -> Epoch:
        """Publish ``version`` as the next epoch; the next seal reads it (E-REG-2)."""
        self._put_body("versions", version.version_id, version_to_body(version))
        return self._append("grader", version.version_id, source).epoch

    def publish_world(self, world: World, *, source: str) -> Publication:
        """Publish ``world``; refused unless the epoch in force covers its tasks (E-REG-1)."""
        current = self.read_pointer()
        version = self.grader(current.epoch.version_id)
        missing = [t for t in world.tasks if not version.covers(t, world.world_id)]
        if missing:
            raise RegistryError(
                f"world {world.world_id!r} is not covered by epoch {current.epoch.index} "
                f"({version.version_id!r}): no spec for {missing}"
            )
        self._put_body("worlds", world.world_id, attrs.asdict(world))
        return self._append("world", world.world_id, source)

    def read_pointer(self) -> PointerRead:
        """Read the pointer once: the epoch and world in force now (contract section 1)."""
        with self._locked(exclusive=False):
            read_at = self.clock()
            log = self._log_entries()
        if not log:
            raise RegistryError(f"registry {self.path} has no publication")
        last = log[-1]
        return PointerRead(seq=last.seq, read_at=read_at, epoch=last.epoch, world=last.world)

    def resolve_start(self) -> Pin:
        """Pin a starting trajectory to the world in force and its epoch (E-REG-3)."""
        pointer = self.read_pointer()
        if pointer.world is None:
            raise RegistryError("no world published: publish one before starting trajectories")
        return Pin(world=pointer.world, epoch=pointer.epoch)

    def grader(self, version_id: str) -> GraderVersion:
        """The published grader version ``version_id``."""
        if version_id not in self._versions:
            path = self.path / "versions" / f"{version_id}.json"
            try:
                body = json.loads(path.read_text())
            except FileNotFoundError:
                raise VersionError(
                    f"grader version {version_id!r} is not published in {self.path}"
                ) from None
            self._versions[version_id] = version_from_body(body)
        return self._versions[version_id]

    def world(self, world_id: str) -> World:
        """The published world ``world_id``."""
        body = json.loads((self.path / "worlds" / f"{world_id}.json").read_text())
        return World(world_id=body["world_id"], tasks=tuple(body["tasks"]))

    def epochs(self) -> list[Epoch]:
        """Every epoch, oldest first."""
        return [p.epoch for p in self.publications() if p.kind == "grader"]

    def startup_epoch(self) -> Epoch:
        """Epoch 0."""
        epochs = self.epochs()
        if not epochs:
            raise RegistryError(f"registry {self.path} has no grader published")
        return epochs[0]

    def epoch_at(self, at: float) -> Epoch | None:
        """The epoch in force at ``at``: the last grader published at or before it (E-REG-4)."""
        return epoch_in_force(self.publications(), at)


def epoch_in_force(publications: list[Publication], at: float) -> Epoch | None:
    """The epoch of the last grader publication of ``publications`` at or before ``at``."""
    found = None
    for publication in publications:
        if publication.kind == "grader" and publication.published_at <= at:
            found = publication.epoch
    return found
