"""The cattrs conversion that every Reef value uses, and how its errors read.

One place decides how attrs values become JSON and back (records, ATIF, settings, request
bodies), so that an error reads the same wherever it comes from: ``<reason> @ $.path.to.key``
(:func:`describe` writes such lines, :func:`split_described` reads one back).

What a user wrote (a deployment, an upload, a request body) is read with
:func:`strict_converter`: a scalar structures only from a value of its own type. cattrs alone
would coerce (``"3"`` to 3, ``2.7`` to 2, ``true`` to 1), and a value of the wrong type is a
mistake the user must see. Nor is a string, a mapping or bytes a list: cattrs would read
``"abc"`` as ``["a", "b", "c"]``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import cattrs
from cattrs.cols import (
    homogenous_tuple_structure_factory,
    is_mutable_sequence,
    is_sequence,
    list_structure_factory,
)
from cattrs.errors import CattrsError
from cattrs.preconf.json import make_converter as make_json_converter


def make_converter(*, forbid_extra_keys: bool = True) -> cattrs.Converter:
    """A JSON-ready converter with Reef's configuration (see :func:`configure_converter`)."""
    converter = make_json_converter(forbid_extra_keys=forbid_extra_keys)
    configure_converter(converter)
    return converter


def strict_converter(
    *,
    forbid_extra_keys: bool = True,
    show_values: bool = False,
    finite_floats: bool = False,
    ints_stay_ints: bool = False,
) -> cattrs.Converter:
    """A converter like :func:`make_converter` whose ``str``, ``int``, ``float`` and ``bool``
    structure only from a value of that type: no boolean where a number belongs, nothing
    coerced; an int is a float (JSON and YAML have one kind of number).

    :param show_values: errors quote the value (``expected int, got str '3'``): for a
        deployment, whose values are short and the user's own. Bodies are not echoed: they may
        be large or private.
    :param finite_floats: refuse NaN and the infinities (a value that cannot be written back
        as JSON).
    :param ints_stay_ints: keep an int given for a float as the int it is, so that what is
        stored and hashed is what the client sent.
    """
    converter = make_converter(forbid_extra_keys=forbid_extra_keys)
    for kind in (str, int, float, bool):
        converter.register_structure_hook(
            kind,
            _strict_scalar(
                kind,
                show_value=show_values,
                finite=finite_floats,
                as_float=not ints_stay_ints,
            ),
        )
    converter.register_structure_hook_factory(
        lambda t: is_sequence(t) or is_mutable_sequence(t), _lists_only
    )
    return converter


def _lists_only(kind: Any, converter: cattrs.Converter) -> Callable[[Any, Any], Any]:
    """cattrs' own hook for the sequence type ``kind``, refusing a value that is not a list."""
    factory = (
        list_structure_factory if is_mutable_sequence(kind) else homogenous_tuple_structure_factory
    )
    inner = factory(kind, converter)

    def structure(value: Any, target: Any) -> Any:
        if isinstance(value, str | bytes | Mapping):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        return inner(value, target)

    return structure


def _strict_scalar(
    kind: type[Any], *, show_value: bool, finite: bool, as_float: bool
) -> Callable[[Any, Any], Any]:
    def wrong(value: Any) -> TypeError:
        if show_value:
            return TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        got = "a boolean" if isinstance(value, bool) else type(value).__name__
        return TypeError(f"expected {kind.__name__}, got {got}")

    def structure(value: Any, _: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise wrong(value)
        if kind is float and isinstance(value, int | float):
            if finite and not math.isfinite(value):
                raise ValueError(f"expected a finite number, got {value!r}")
            return float(value) if as_float else value
        if not isinstance(value, kind):
            raise wrong(value)
        return value

    return structure


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


def split_described(line: str, *, root: str = "$") -> tuple[str, str]:
    """A line of :func:`describe` (``<reason> @ <path>``) as a (path, reason) pair; a line
    without a path (an error raised outside cattrs) is about ``root``."""
    reason, _, path = line.rpartition(" @ ")
    return (path, reason) if reason else (root, line)
