"""The one rule for the names a client gives the service, and the one place it is checked.

A *name* is what a client chooses and the service keys something by: a scenario in a path, a
data item's id, a trainer, a task's name, a report's or an instruction's id. Names end up in
SQL keys, in job ids, in the files a component writes and in folders a stage stages tasks in,
so each is checked once, as it comes in, by :func:`check_name`:

- 1 to :data:`MAX_NAME` characters;
- no separator (``/``, ``\\``), no ``..``, not ``.`` alone;
- no control character (NUL, newline, DEL and the like).

It is applied without the routes asking: every path parameter is checked by the route table
(:meth:`reef.server.openapi.ApiRoute.endpoint`, all but those the table declares as
``{name:path}``), and every body or query field that holds a name is declared with the
validator :func:`valid_name`, so structuring the body checks it. A refused name is a 400
naming the field and the rule, and nothing of the request is stored.

The ids the service itself made (sample ids, record ids, group ids) are looked up as given: the
service never builds anything from them.
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from reef.server.errors import ApiError

__all__ = ["MAX_NAME", "NAME_RULE", "check_name", "name_problem", "valid_name"]

#: The longest name, in characters.
MAX_NAME: Final = 200

#: The rule, as an error states it.
NAME_RULE: Final = (
    f"a name is 1 to {MAX_NAME} characters without '/', '\\', '..' or control characters"
)


def name_problem(value: str) -> str | None:
    """What is wrong with ``value`` as a name, or ``None`` when it is one."""
    if not value:
        return f"the name is empty; {NAME_RULE}"
    if len(value) > MAX_NAME:
        return f"the name is {len(value)} characters long; {NAME_RULE}"
    if "/" in value or "\\" in value:
        return f"the name {value[:40]!r} holds a path separator; {NAME_RULE}"
    if ".." in value or value == ".":
        return f"the name {value[:40]!r} holds '..' or is '.'; {NAME_RULE}"
    if any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 for c in value):
        return f"the name {value[:40]!r} holds a control character; {NAME_RULE}"
    return None


def check_name(value: str, field: str) -> str:
    """``value`` when it is a name.

    :raises ApiError: 400 naming ``field`` and the rule.
    """
    problem = name_problem(value)
    if problem is not None:
        raise ApiError.one(400, "invalid_request", field, problem)
    return value


def valid_name(_: object, attribute: attrs.Attribute[Any], value: str | None) -> None:
    """The attrs validator of a body or query field that holds a name (``None`` is let through
    for an optional one): structuring refuses anything else with a 400 at the field's path.

    :raises ValueError: naming the attribute (the body's reader turns it into its path).
    """
    if value is not None:
        problem = name_problem(value)
        if problem is not None:
            raise ValueError(f"'{attribute.name}': {problem}")
