"""JSON files written whole: the journals of the components that keep state in a folder.

:func:`write_json` writes through :func:`reef.components.durable.write_bytes` (a temporary name,
flushed, renamed, the folder flushed), so a reader (or a process that starts after a crash of
the process or the machine) sees the old file or the new one, never a part.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reef.components.durable import write_bytes


def write_json(path: Path, body: Any) -> None:
    """Write ``body`` to ``path`` whole, making its folder when missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes(path, json.dumps(body, sort_keys=True).encode("utf-8"))


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or ``None`` when there is no such file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
