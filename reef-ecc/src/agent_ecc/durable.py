"""Durable file writes: a file appears whole or not at all, and survives a crash once written.

Every shared file of agent-ecc (registry bodies, log entries, store objects) is written to a
temporary name in the target folder, fsynced, then moved into place; the folder is fsynced so the
new name itself is durable.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def fsync_dir(path: Path) -> None:
    """Make the entries of folder ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_temp(folder: Path, data: bytes) -> Path:
    fd, name = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Path(name)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (replacing it) so that readers see the old or the new file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = _write_temp(path.parent, data)
    os.replace(temp, path)
    fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes) -> bool:
    """Create ``path`` with ``data`` unless it exists; True when this call created it.

    The file is linked into place whole, so a concurrent creator of the same name either wins
    the name or sees it taken, and never sees it half-written.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = _write_temp(path.parent, data)
    try:
        os.link(temp, path)
    except FileExistsError:
        return False
    finally:
        temp.unlink()
    fsync_dir(path.parent)
    return True
