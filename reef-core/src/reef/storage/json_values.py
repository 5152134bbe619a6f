"""How the stores write JSON values as text: canonical, so equal values are equal text.

Conflict checks ("is this the same sample, the same instruction?") are then a comparison of
two strings, the same on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["dump", "dump_numbers", "load"]


def dump(value: Any) -> str:
    """``value`` as canonical JSON text (sorted keys, no spaces, no NaN).

    :raises ValueError: for a value that is not JSON (NaN, infinity).
    :raises TypeError: for a value of a type JSON does not have.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)


def dump_numbers(value: Any) -> str:
    """``value`` as canonical JSON text, where a float that is not finite is written as
    ``NaN``, ``Infinity`` or ``-Infinity``, which :func:`load` reads back as that float.

    For values that only Reef reads back and that may carry such numbers (a job's metrics:
    a diverged loss is NaN); never for text served as JSON, which has no such numbers.

    :raises TypeError: for a value of a type JSON does not have.
    """
    return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=True)


def load(text: str) -> Any:
    """The value that :func:`dump` or :func:`dump_numbers` wrote."""
    return json.loads(text)
