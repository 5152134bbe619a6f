"""JSON files written whole: the journals of the components that keep state in a folder.

:func:`write_json` writes to a temporary name, syncs and renames, so a reader (or a process that
starts after a crash) sees the old file or the new one, never a part.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def write_json(path: Path, body: Any) -> None:
    """Write ``body`` to ``path`` whole, making its folder when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(staging, "w", encoding="utf-8") as handle:
        json.dump(body, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(staging, path)


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or ``None`` when there is no such file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
