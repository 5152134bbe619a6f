"""How the stores write JSON values as text: canonical, so equal values are equal text.

Conflict checks ("is this the same sample, the same instruction?") are then a comparison of
two strings, the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["dump", "load"]


def dump(value: Any) -> str:
    """``value`` as canonical JSON text (sorted keys, no spaces, no NaN).

    :raises ValueError: for a value that is not JSON (NaN, infinity).
    :raises TypeError: for a value of a type JSON does not have.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def load(text: str) -> Any:
    """The value that :func:`dump` wrote."""
    return json.loads(text)
