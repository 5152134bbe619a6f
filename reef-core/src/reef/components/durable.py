"""Files and folders written all or nothing, durably: after a crash of the process or of the
machine, a path holds its old content or its new content, whole, never a mix.

Each is written under a temporary name beside its place, flushed to the disk (``fsync``),
renamed into place, and the parent folder flushed so that the rename itself survives. The
trainer commits a job's end to its database durably (``synchronous=FULL`` on SQLite); the
weights the job made must be on the disk before that commit, or a power loss could leave a
job counted as trained whose weights are gone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def fsync_path(path: Path) -> None:
    """Flush a file, or a folder's entries, to the disk."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``, all or nothing, durably."""
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with staging.open("wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)
    fsync_path(path.parent)


def _flush_all(paths: Collection[Path]) -> None:
    """Flush ``paths`` together: their flushes share the disk's cache flushes."""
    with ThreadPoolExecutor(max_workers=min(8, len(paths) or 1)) as flushing:
        list(flushing.map(fsync_path, paths))


def replace_folder(
    target: Path,
    fill: Callable[[Path], None],
    *,
    flush_files: bool = True,
    links: Mapping[Path, Collection[str]] | None = None,
) -> None:
    """Replace the folder ``target`` (made if missing) with the files that ``fill`` writes into
    an empty folder, all or nothing, durably. ``fill``'s exception leaves ``target`` as it was.

    :param flush_files: False when ``fill`` only links files that are on the disk already.
    :param links: more folders to make, each of hard links to the new files but those named
        (copies where the file system has no links), in the same flushes; one that exists
        already is left as it is (it holds the same files: a content-addressed folder).
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    made: dict[Path, Path] = {}
    try:
        fill(staging)
        if flush_files:
            _flush_all(list(staging.iterdir()))
        for folder, skip in (links or {}).items():
            if not folder.exists():
                folder.parent.mkdir(parents=True, exist_ok=True)
                made[folder] = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
                _link_files(staging, made[folder], skip)
        _flush_all([staging, *made.values()])
        for folder, linked in made.items():
            os.replace(linked, folder)
        retired = retired_name(target)
        if target.exists():
            # A folder cannot be renamed over another: the old one steps aside first. A crash
            # between the two renames leaves only the retired folder, which restore_retired
            # puts back.
            shutil.rmtree(retired, ignore_errors=True)
            os.replace(target, retired)
        os.replace(staging, target)
        _flush_all({target.parent, *(folder.parent for folder in made)})
        shutil.rmtree(retired, ignore_errors=True)
    except BaseException:
        for leftover in (staging, *made.values()):
            shutil.rmtree(leftover, ignore_errors=True)
        raise


def _link_files(source: Path, target: Path, skip: Collection[str]) -> None:
    for entry in source.iterdir():
        if entry.name in skip:
            continue
        try:
            os.link(entry, target / entry.name)
        except OSError:  # another file system, or one without hard links
            shutil.copy2(entry, target / entry.name)
            fsync_path(target / entry.name)


def retired_name(target: Path) -> Path:
    """Where :func:`replace_folder` moves the old folder while it renames the new one in."""
    return target.with_name(f".{target.name}.retired")


def restore_retired(target: Path) -> None:
    """After a crash between :func:`replace_folder`'s two renames, put the old folder back."""
    retired = retired_name(target)
    if not target.exists() and retired.exists():
        os.replace(retired, target)
        fsync_path(target.parent)


def link_folder(source: Path, target: Path, *, skip: Collection[str] = ()) -> None:
    """Make ``target`` a folder of the files of ``source`` but those named in ``skip`` (hard
    links where the file system allows, copies elsewhere), all or nothing, durably. The files
    of ``source`` must never be written in place afterwards (:func:`replace_folder` never
    does)."""
    replace_folder(target, lambda staging: _link_files(source, staging, skip), flush_files=False)
