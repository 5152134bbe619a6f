"""Reading a request's JSON body within bounds, before anything acts on it.

A body is read up to the route's size limit (413 beyond), parsed, and then walked once
(iteratively, so no input can exhaust the stack) to refuse, with a 400 naming the JSON path and
the limit, what the service could not store or hash later, or would have to pass on unchecked:

- nesting deeper than :data:`MAX_DEPTH` arrays and objects;
- an integer outside 64 bits (:data:`MIN_INT` to :data:`MAX_INT`);
- a number that is not finite (``NaN``, ``Infinity``, or ``1e400``, which parses as infinity);
- a string, or an object key, holding a lone surrogate (``"\\ud800"``): it cannot be written as
  UTF-8, so a call carrying one is refused before the engine sees it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any, Final

from starlette.requests import Request

from reef.server.errors import ApiError

__all__ = ["MAX_DEPTH", "MAX_INT", "MIN_INT", "read_json", "request_bytes"]

#: The deepest nesting of arrays and objects a body may have.
MAX_DEPTH: Final = 100
#: The largest integer a body may hold (an unsigned 64-bit value).
MAX_INT: Final = (1 << 64) - 1
#: The smallest integer a body may hold (a signed 64-bit value).
MIN_INT: Final = -(1 << 63)


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body, read up to ``limit`` bytes and checked (module docstring).

    :raises ApiError: 413 beyond ``limit`` bytes; 400 when the body is not JSON or breaks a
        bound, naming the path and the bound.
    """
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    size = 0
    parts: list[bytes] = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        parts.append(chunk)
    request.state.body_bytes = size
    return parse_json(b"".join(parts))


def request_bytes(request: Request) -> int:
    """How many bytes of body :func:`read_json` read from ``request`` (0 before it did)."""
    size = getattr(request.state, "body_bytes", 0)
    return size if isinstance(size, int) else 0


def parse_json(body: bytes) -> Any:
    """``body`` parsed as JSON and checked against the bounds of the module docstring.

    :raises ApiError: 400 naming what is wrong, where.
    """
    try:
        value = json.loads(body, parse_constant=_refuse_constant)
    except RecursionError:
        raise _refused("$", f"nested deeper than {MAX_DEPTH} arrays and objects") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError.one(400, "invalid_request", "$", f"the body is not JSON: {exc}") from None
    for path, problem in _problems(value):
        raise _refused(path, problem)
    return value


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _problems(value: Any) -> Iterator[tuple[str, str]]:
    """Each ``(path, problem)`` of ``value``, found without recursion."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_DEPTH:
                yield path, f"nested deeper than {MAX_DEPTH} arrays and objects"
                return
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            for key, child in pairs:
                if isinstance(key, str):
                    if not _encodable(key):
                        yield path, f"the key {key!r} holds a lone surrogate (not UTF-8)"
                    stack.append((child, f"{path}.{key}", depth + 1))
                else:
                    stack.append((child, f"{path}[{key}]", depth + 1))
        elif isinstance(item, str):
            if not _encodable(item):
                yield path, "the string holds a lone surrogate (not UTF-8)"
        elif isinstance(item, int) and not isinstance(item, bool):
            if not MIN_INT <= item <= MAX_INT:
                yield path, f"the integer is beyond 64 bits ({MIN_INT} to {MAX_INT})"
        elif isinstance(item, float) and not math.isfinite(item):
            yield path, "the number is not finite (too large for a 64-bit float)"


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _refused(path: str, problem: str) -> ApiError:
    return ApiError.one(400, "invalid_request", path, problem)


def _too_large(limit: int) -> ApiError:
    return ApiError.one(413, "too_large", "$", f"the body is larger than {limit} bytes")
