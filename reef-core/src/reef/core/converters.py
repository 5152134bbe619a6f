"""The cattrs conversion that every Reef value uses, and how its errors read.

One place decides how attrs values become JSON and back (records, ATIF, settings), so that an
error reads the same wherever it comes from: ``<reason> @ $.path.to.key``.
"""

from __future__ import annotations

from typing import Any

import cattrs
from cattrs.errors import CattrsError
from cattrs.preconf.json import make_converter as make_json_converter


def make_converter(*, forbid_extra_keys: bool = True) -> cattrs.Converter:
    """A JSON-ready converter with Reef's configuration (see :func:`configure_converter`)."""
    converter = make_json_converter(forbid_extra_keys=forbid_extra_keys)
    configure_converter(converter)
    return converter


def configure_converter(converter: cattrs.Converter) -> None:
    """Apply Reef's conventions to ``converter``.

    Tuples are written as lists and read back from any sequence, which cattrs does already;
    this hook is the place for any later convention so that callers never configure cattrs
    themselves.
    """
    del converter  # nothing beyond cattrs' JSON preconfiguration yet


def describe_exception(exc: BaseException, type_: Any) -> str:
    """The reason one structuring error gives, as a user should read it."""
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown key(s): {', '.join(sorted(exc.extra_fields))}"
    if isinstance(exc, CattrsError) and " not in literal " in str(exc):
        allowed = ", ".join(repr(v) for v in getattr(type_, "__args__", ()))
        value = str(exc).split(" not in literal ", 1)[0]
        return f"{value!r} is not one of {allowed}" if allowed else str(exc)
    if isinstance(exc, ValueError | TypeError) and str(exc):
        reason = str(exc)
        # cattrs' own type-coercion failures say little; name the expected type instead.
        if reason.startswith(("could not convert", "invalid literal", "must be")):
            return f"invalid value for type, expected {getattr(type_, '__name__', type_)}"
        return reason
    return cattrs.v.format_exception(exc, type_)


def describe(exc: cattrs.BaseValidationError, *, root: str = "$") -> list[str]:
    """Every problem of a failed structuring, as ``<reason> @ <path>`` lines."""
    return cattrs.transform_error(exc, path=root, format_exception=describe_exception)
