"""The JSON form of agent-ecc's values (records, scores, decisions), through one cattrs converter.

agent-ecc does not import Reef, so it keeps its own converter with Reef's conventions: unknown
keys are refused, and an error names the path of the bad value (``... @ $.runs[0].log``).
"""

from __future__ import annotations

from typing import Any, TypeVar

import cattrs
from cattrs.preconf.json import make_converter

from agent_ecc.versions import Spec, spec_from_body, spec_to_body

T = TypeVar("T")


class FormatError(ValueError):
    """A JSON body does not have the shape of the value it should hold."""


converter = make_converter(forbid_extra_keys=True)
converter.register_unstructure_hook(Spec, spec_to_body)
converter.register_structure_hook(Spec, lambda body, _: spec_from_body(body))


def to_json(value: Any) -> Any:
    """``value`` as plain JSON data."""
    return converter.unstructure(value)


def from_json(cls: type[T], body: Any) -> T:
    """A ``cls`` from JSON data; :class:`FormatError` naming every problem and its path."""
    try:
        return converter.structure(body, cls)
    except cattrs.BaseValidationError as error:
        problems = cattrs.transform_error(error, path="$")
        raise FormatError(f"not a {cls.__name__}: {'; '.join(problems)}") from None
