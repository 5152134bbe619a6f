"""Plugin settings: what every stage parses, and the errors a bad configuration raises.

A stage never reads a raw mapping. It declares its keys as a frozen attrs class that extends
:class:`PluginSettings` (fields made with :func:`reef.core.config.config_option`) and parses its
config with ``Settings.parse(config, plugin_class=cls)``, which refuses an unknown key (with the
closest valid one), a wrong type or a bad value, reporting every problem at once.

Settings only: finding and loading plugins is :mod:`reef.plugins`, a floor above the hook specs.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Self

import attrs
import cattrs
from cattrs.errors import CattrsError

from reef.core.config import config_option, option_help, option_key
from reef.core.converters import describe, describe_exception, split_described, strict_converter
from reef.errors import ReefError

# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------


class PluginConfigError(ReefError, ValueError):
    """A plugin's config is wrong: ``plugin`` names the plugin class, ``key`` the path of the key
    (``$.pipeline.sample2job.config.job_samples``) and ``reason`` what is wrong with it.

    One error can carry several problems of the same config: ``errors`` holds each of them as
    a single-problem error (the first is this error's own ``plugin``, ``key`` and ``reason``).
    """

    plugin: str
    key: str
    reason: str
    errors: tuple[PluginConfigError, ...]

    def __init__(
        self,
        plugin: str,
        key: str,
        reason: str,
        *,
        errors: Sequence[PluginConfigError] = (),
    ) -> None:
        self.plugin = plugin
        self.key = key
        self.reason = reason
        self.errors = tuple(errors) or (self,)
        super().__init__("\n".join(f"{e.plugin}: {e.reason} @ {e.key}" for e in self.errors))

    @classmethod
    def of(cls, errors: Sequence[PluginConfigError]) -> Self:
        """One error that reports every problem of ``errors`` (at least one)."""
        first = errors[0]
        return cls(first.plugin, first.key, first.reason, errors=errors)


class RecipeConfigError(PluginConfigError):
    """A recipe cannot be built from the deployment, for a reason of the recipe as a whole (a
    weight recipe whose deployment sets no ``job_samples``); ``plugin`` names the recipe."""


# --------------------------------------------------------------------------------------------
# settings
# --------------------------------------------------------------------------------------------


# A deployment's values are short and the user's own: its errors quote them.
_CONVERTER = strict_converter(show_values=True)


def _unknown_key_reason(key: str, valid: Sequence[str]) -> str:
    if not valid:
        return f"unknown key {key!r}: this plugin takes no keys"
    close = difflib.get_close_matches(key, valid, n=1)
    if close:
        return f"unknown key {key!r}, did you mean {close[0]!r}?"
    return f"unknown key {key!r}; valid keys: {', '.join(sorted(valid))}"


@attrs.frozen
class PluginSettings:
    """The base of every plugin's settings: a frozen attrs class parsed from a raw mapping."""

    @classmethod
    def parse(
        cls,
        config: Mapping[str, Any] | None,
        *,
        plugin_class: type[Any] | str,
        path: str = "$",
    ) -> Self:
        """Structure ``config`` (a mapping from the deployment; ``None`` reads as ``{}``).

        :param plugin_class: the plugin (stage, recipe) that owns these settings, or its class
            name (a class not imported yet); errors name it.
        :param path: where ``config`` sits in its document, the prefix of every error's key.
        :raises PluginConfigError: listing every unknown key (with the closest valid one), every
            missing required key, every value of the wrong type and every value a validator
            refuses, each at its own path.
        """
        problems: list[tuple[str, str]] = []
        settings = cls.structure_at(config, path, problems)
        if settings is None:
            plugin = plugin_class if isinstance(plugin_class, str) else plugin_class.__name__
            raise PluginConfigError.of([PluginConfigError(plugin, k, r) for k, r in problems])
        return settings

    def as_keywords(self) -> dict[str, Any]:
        """The settings as keyword arguments: each field's ``__init__`` name and its value.

        A stage base's default ``from_config`` hands them to the stage's constructor, so a
        stage whose constructor takes its settings' fields needs no ``from_config`` of its own.
        """
        return {field.alias: getattr(self, field.name) for field in attrs.fields(type(self))}

    @classmethod
    def structure_at(
        cls, config: object, path: str, problems: list[tuple[str, str]]
    ) -> Self | None:
        """Structure ``config`` found at ``path``, appending every problem to ``problems`` as a
        (key path, reason) pair; ``None`` when there is any. :meth:`parse` is this, raising;
        a document made of settings sections (the deployment file) collects across sections.
        """
        if config is None:
            config = {}
        if not isinstance(config, Mapping):
            problems.append((path, f"expected a mapping, got {type(config).__name__}"))
            return None
        before = len(problems)
        attrs.resolve_types(cls)  # settings modules may write annotations as strings
        fields = {option_key(f): f for f in attrs.fields(cls) if f.init}
        for key in config:
            if not isinstance(key, str):
                problems.append((path, f"keys must be strings, got {type(key).__name__} {key!r}"))
            elif key not in fields:
                problems.append((f"{path}.{key}", _unknown_key_reason(key, list(fields))))
        values: dict[str, Any] = {}
        for key, field in fields.items():
            key_path = f"{path}.{key}"
            if key not in config:
                if field.default is attrs.NOTHING:
                    helptext = option_help(field)
                    reason = "required key missing" + (f" ({helptext})" if helptext else "")
                    problems.append((key_path, reason))
                continue
            count = len(problems)
            value = _structure_value(config[key], field.type, key_path, problems)
            if len(problems) > count:
                continue
            if field.validator is not None:
                try:
                    # attrs validators read the attribute and the value, never the instance,
                    # which does not exist yet: each key is checked on its own so that every
                    # bad value is reported, not only the first.
                    field.validator(None, field, value)
                except (ValueError, TypeError) as exc:
                    problems.append((key_path, str(exc)))
                    continue
            values[field.alias] = value
        if len(problems) > before:
            return None
        try:
            return cls(**values)
        except (ValueError, TypeError) as exc:  # a check across keys, in __attrs_post_init__
            problems.append((path, str(exc)))
            return None


def _settings_class(type_: Any) -> type[PluginSettings] | None:
    if isinstance(type_, type) and issubclass(type_, PluginSettings):
        return type_
    return None


def _section_list(type_: Any) -> type[PluginSettings] | None:
    """The settings class of ``tuple[Section, ...]``."""
    args = typing.get_args(type_)
    if typing.get_origin(type_) is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _settings_class(args[0])
    return None


def _structure_value(value: object, type_: Any, path: str, problems: list[tuple[str, str]]) -> Any:
    """Structure one value; sections (settings classes, optional, in a list, or in a mapping by
    name) are structured key by key so that their unknown keys get suggestions too. A section
    that may also be a list of such sections (``Section | tuple[Section, ...]``) reads a list
    as the list, anything else as one section."""
    args = typing.get_args(type_)
    if typing.get_origin(type_) in (types.UnionType, typing.Union) and type(None) in args:
        if value is None:
            return None
        rest = [a for a in args if a is not type(None)]
        section = _settings_class(rest[0]) if len(rest) in (1, 2) else None
        if section is not None and len(rest) == 2 and _section_list(rest[1]) is section:
            chosen = rest[1] if isinstance(value, list) else section
            return _structure_value(value, chosen, path, problems)
        if section is not None and len(rest) == 1:
            return section.structure_at(value, path, problems)
    section = _settings_class(type_)
    if section is not None:
        return section.structure_at(value, path, problems)
    item_section = _section_list(type_)
    if item_section is not None:
        if not isinstance(value, list):
            problems.append((path, f"expected a list, got {type(value).__name__}"))
            return None
        return tuple(
            item_section.structure_at(item, f"{path}[{index}]", problems)
            for index, item in enumerate(value)
        )
    if typing.get_origin(type_) in (dict, Mapping) and len(args) == 2:
        item_section = _settings_class(args[1])
        if item_section is not None:
            if not isinstance(value, Mapping):
                problems.append((path, f"expected a mapping, got {type(value).__name__}"))
                return None
            return {
                str(name): item_section.structure_at(item, f"{path}.{name}", problems)
                for name, item in value.items()
            }
    try:
        return _CONVERTER.structure(value, type_)
    except cattrs.BaseValidationError as exc:
        problems.extend(split_described(line, root=path) for line in describe(exc, root=path))
    except (ValueError, TypeError, CattrsError) as exc:
        problems.append((path, describe_exception(exc, type_)))
    return None


@attrs.frozen
class NoSettings(PluginSettings):
    """The settings of a stage that takes no config: any key is refused."""


@attrs.frozen
class Record2SampleSettings(PluginSettings):
    """The settings of a record-to-sample stage that holds units: its staleness limit.

    A stage with more keys extends this class, so ``max_staleness`` sits beside its own keys.
    """

    max_staleness: int = config_option(
        default=0,
        help=(
            "how many artifacts behind the served one a sample's data may be and still train;"
            " 0 trains only data of the artifact the scenario serves"
        ),
        validator=attrs.validators.ge(0),
    )
