"""What a plugin's discovery hooks receive and contribute: :class:`PluginRegistrar`.

A discovery hook (``reef_register_record2sample(registry)``, ...) gets a registrar bound to
one :class:`PluginKind` and calls ``registry.register("ShortName", TheClass)`` for each class
it contributes; :class:`reef.plugins.Plugins` records each as a :class:`Registration`.
This module imports no hook specification, so the hook specs can name its types.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from reef.errors import ReefError


class PluginKind(enum.StrEnum):
    """What a registered class is: the kinds a deployment names a class of."""

    RECIPE = "recipe"
    RECORD2SAMPLE = "record2sample"
    SAMPLE2JOB = "sample2job"
    TASK_GENERATOR = "task_generator"
    COMPONENT = "component"
    EXTENSION = "extension"


class PluginError(ReefError):
    """Discovery went wrong: a plugin, a name or a reference cannot be used."""


class PluginLoadError(PluginError):
    """A plugin's entry point failed to load for a reason other than a missing dependency."""


class DuplicatePluginNameError(PluginError):
    """Two plugins registered the same name for the same kind."""


class UnknownPluginError(PluginError, LookupError):
    """A name or ``module:Class`` reference that resolves to no class of its kind.

    :ivar kind: the kind that was looked up.
    :ivar name: the name or reference as written.
    :ivar installed: the names of that kind that are registered.
    """

    def __init__(self, kind: PluginKind, name: str, installed: Sequence[str], detail: str) -> None:
        self.kind = kind
        self.name = name
        self.installed = tuple(installed)
        super().__init__(detail)


@attrs.frozen
class Registration:
    """One class contributed under a short name, and who contributed it.

    :ivar plugin: the name of the plugin that registered it (its entry-point name).
    :ivar distribution: the distribution that provides the plugin; ``None`` for a plugin
        registered in-process (tests, embedding).
    """

    kind: PluginKind
    name: str
    cls: type[Any]
    plugin: str
    distribution: str | None
    version: str | None

    @property
    def provider(self) -> str:
        """``dist version`` or, for an in-process plugin, its plugin name."""
        if self.distribution is None:
            return f"<{self.plugin}>"
        return f"{self.distribution} {self.version}"


class PluginRegistrar:
    """What a discovery hook receives: ``register(name, cls)`` adds one class of its kind."""

    def __init__(self, kind: PluginKind) -> None:
        self.kind = kind
        self._classes: dict[str, type[Any]] = {}

    def register(self, name: str, cls: type[Any]) -> None:
        """Contribute ``cls`` under ``name`` (short, user-facing: what a deployment writes)."""
        if not name or not isinstance(name, str) or ":" in name:
            raise PluginError(f"{self.kind} name must be a non-empty string without ':': {name!r}")
        if not isinstance(cls, type):
            raise PluginError(f"{self.kind} {name!r} must be a class, got {cls!r}")
        if name in self._classes:
            raise DuplicatePluginNameError(f"{self.kind} {name!r} registered twice by one plugin")
        self._classes[name] = cls

    @property
    def contributed(self) -> Mapping[str, type[Any]]:
        """The classes registered through this registrar, by name."""
        return self._classes
