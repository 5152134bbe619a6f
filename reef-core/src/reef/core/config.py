"""Configuration keys: the fields of a plugin's settings, made by :func:`config_option`.

A plugin's settings are a frozen attrs class whose fields come from :func:`config_option`, so
every key carries the help text that documentation and error messages show.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

#: The metadata key under which :func:`config_option` stores a field's help text.
HELP_METADATA_KEY = "reef.help"
#: The metadata key under which :func:`config_option` stores a key spelled unlike its field.
KEY_METADATA_KEY = "reef.key"

_Validator = Callable[[Any, "attrs.Attribute[Any]", Any], Any]


def config_option(
    default: Any = attrs.NOTHING,
    *,
    help: str,
    validator: _Validator | list[_Validator] | None = None,
    factory: Callable[[], Any] | None = None,
    key: str | None = None,
) -> Any:
    """One key of a plugin's settings class: an attrs field that carries its ``help`` text.

    Without ``default`` or ``factory`` the key is required. ``validator`` is an attrs validator
    (or a list of them); a :class:`ValueError` or :class:`TypeError` it raises becomes a
    :class:`reef.core.plugins.PluginConfigError` at the key's path. Fields are keyword-only, so
    a settings class can extend another (``Record2SampleSettings``) with required keys.
    ``key`` spells the key in the config when the field's name cannot (``class``).
    """
    if not help.strip():
        raise ValueError("config_option needs a help text: it is what users read")
    return attrs.field(
        default=default,
        factory=factory,
        validator=validator,
        kw_only=True,
        metadata={HELP_METADATA_KEY: help, **({KEY_METADATA_KEY: key} if key else {})},
    )


def option_help(field: attrs.Attribute[Any]) -> str:
    """The help text of a settings field, or ``""`` for a field not made by ``config_option``."""
    return str(field.metadata.get(HELP_METADATA_KEY, ""))


def option_key(field: attrs.Attribute[Any]) -> str:
    """The key that sets ``field`` in a config: its ``key``, or the field's init name."""
    return str(field.metadata.get(KEY_METADATA_KEY, field.alias))
