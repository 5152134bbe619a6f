"""The one strict-scalar convention that settings, ATIF and request bodies share."""

from __future__ import annotations

import math
from typing import Any

import attrs
import cattrs
import pytest

from reef.core.converters import describe, split_described, strict_converter


@attrs.frozen
class _Body:
    count: int
    ratio: float
    name: str
    flag: bool


GOOD = {"count": 1, "ratio": 2, "name": "n", "flag": True}


def _problems(converter: cattrs.Converter, body: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(cattrs.BaseValidationError) as caught:
        converter.structure(body, _Body)
    return [split_described(line) for line in describe(caught.value)]


@pytest.mark.parametrize(
    ("key", "value", "quiet", "loud"),
    [
        ("count", True, "expected int, got a boolean", "expected int, got bool True"),
        ("count", "3", "expected int, got str", "expected int, got str '3'"),
        ("count", 2.7, "expected int, got float", "expected int, got float 2.7"),
        ("ratio", False, "expected float, got a boolean", "expected float, got bool False"),
        ("name", 1, "expected str, got int", "expected str, got int 1"),
        ("flag", 1, "expected bool, got int", "expected bool, got int 1"),
    ],
)
def test_a_scalar_of_another_type_is_refused_not_coerced(
    key: str, value: object, quiet: str, loud: str
) -> None:
    body = {**GOOD, key: value}
    assert _problems(strict_converter(), body) == [(f"$.{key}", quiet)]
    assert _problems(strict_converter(show_values=True), body) == [(f"$.{key}", loud)]


def test_an_int_is_a_float_and_stays_an_int_only_when_asked() -> None:
    assert type(strict_converter().structure(GOOD, _Body).ratio) is float
    assert type(strict_converter(ints_stay_ints=True).structure(GOOD, _Body).ratio) is int


def test_finite_floats_refuse_nan_and_infinity() -> None:
    for value in (math.nan, math.inf):
        assert strict_converter().structure({**GOOD, "ratio": value}, _Body).ratio != 0
        problems = _problems(strict_converter(finite_floats=True), {**GOOD, "ratio": value})
        assert problems == [("$.ratio", f"expected a finite number, got {value!r}")]


def test_a_described_line_splits_into_path_and_reason() -> None:
    assert split_described("unknown key(s): x @ $.a.b") == ("$.a.b", "unknown key(s): x")
    assert split_described("a @ b @ $.c") == ("$.c", "a @ b")
    assert split_described("no path here", root="$.config") == ("$.config", "no path here")
