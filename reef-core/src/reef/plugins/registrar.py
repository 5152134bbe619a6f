"""What a plugin's discovery hooks receive and contribute: :class:`PluginRegistrar`.

A discovery hook (``reef_register_record2sample(registry)``, ...) gets a registrar bound to
one :class:`PluginKind` and calls ``registry.register("ShortName", TheClass)`` for each class
it contributes; :class:`reef.plugins.Plugins` records each as a :class:`Registration`.

A class may be registered as a ``"module:Class"`` reference instead: it is imported the first
time something resolves it, so listing plugins and reading a deployment never import what they
do not use (a component's PyTorch, an SDK). A reference may name its settings class too
(``settings="module:Settings"``): a deployment's config for it is then checked without
importing the class itself. This module imports no hook specification, so the hook specs can
name its types.
"""

from __future__ import annotations

import enum
import importlib
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

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
    TRACKER = "tracker"


class PluginError(ReefError):
    """Discovery went wrong: a plugin, a name or a reference cannot be used."""


class PluginLoadError(PluginError):
    """A plugin's entry point failed to load for a reason other than a missing dependency, or a
    class it registered by reference failed to import."""


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


#: A ``module:Class`` reference: a dotted module, a colon, a dotted class name.
REFERENCE: Final = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def import_reference(reference: str) -> Any:
    """The object a ``module:Class`` reference names (``Class`` may be dotted), imported.

    :raises ImportError: when the module cannot be imported.
    :raises AttributeError: when the module has no such name.
    """
    module_name, _, qualname = reference.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        target = getattr(target, part)
    return target


def reference_of(cls: type[Any]) -> str:
    """``module:Class`` of a class."""
    return f"{cls.__module__}:{cls.__qualname__}"


@attrs.frozen
class Registration:
    """One class contributed under a short name, and who contributed it.

    :ivar target: the class, or the ``module:Class`` reference it was registered as (imported
        by :meth:`load`, once).
    :ivar settings: the ``module:Class`` reference of its settings class, when it was registered
        by reference with one; ``None`` otherwise.
    :ivar plugin: the name of the plugin that registered it (its entry-point name).
    :ivar distribution: the distribution that provides the plugin; ``None`` for a plugin
        registered in-process (tests, embedding).
    """

    kind: PluginKind
    name: str
    target: type[Any] | str
    plugin: str
    distribution: str | None
    version: str | None
    settings: str | None = None
    #: What :meth:`load` imported, kept with the registration (``target`` stays as written).
    _loaded: dict[str, type[Any]] = attrs.field(factory=dict, init=False, eq=False, repr=False)

    @property
    def reference(self) -> str:
        """``module:Class`` of the registered class, without importing it."""
        return self.target if isinstance(self.target, str) else reference_of(self.target)

    @property
    def loaded(self) -> bool:
        """Whether the class is imported (registered as a class, or loaded since)."""
        return not isinstance(self.target, str) or "class" in self._loaded

    def load(self) -> type[Any]:
        """The registered class, importing its module the first time.

        :raises PluginLoadError: naming the reference and the plugin, when it does not import
            or names no class.
        """
        if not isinstance(self.target, str):
            return self.target
        found = self._loaded.get("class")
        if found is None:
            found = self._import(self.target)
            self._loaded["class"] = found
        return found

    @property
    def cls(self) -> type[Any]:
        """The registered class (:meth:`load`)."""
        return self.load()

    def settings_class(self) -> type[Any] | None:
        """The settings class named by :attr:`settings`, imported; ``None`` when the
        registration names none (the class's own ``Settings`` is then what it reads)."""
        if self.settings is None:
            return None
        found = self._loaded.get("settings")
        if found is None:
            found = self._import(self.settings)
            self._loaded["settings"] = found
        return found

    def _import(self, reference: str) -> type[Any]:
        where = f"{self.kind} {self.name!r} ({reference}, registered by {self.provider})"
        try:
            target = import_reference(reference)
        except (ImportError, AttributeError) as exc:
            raise PluginLoadError(f"{where} cannot be imported: {exc}") from exc
        if not isinstance(target, type):
            raise PluginLoadError(f"{where} is not a class: {target!r}")
        return target

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
        self._classes: dict[str, tuple[type[Any] | str, str | None]] = {}

    def register(self, name: str, cls: type[Any] | str, *, settings: str | None = None) -> None:
        """Contribute ``cls`` under ``name`` (short, user-facing: what a deployment writes).

        :param cls: the class, or a ``module:Class`` reference imported when it is first
            resolved (so that loading plugins imports nothing a deployment does not use).
        :param settings: with a reference, the ``module:Class`` reference of the class's
            settings: a deployment's config is then checked without importing ``cls``.
        """
        if not name or not isinstance(name, str) or ":" in name:
            raise PluginError(f"{self.kind} name must be a non-empty string without ':': {name!r}")
        if isinstance(cls, str):
            if REFERENCE.fullmatch(cls) is None:
                raise PluginError(
                    f"{self.kind} {name!r} must be a class or a 'module:Class' reference,"
                    f" got {cls!r}"
                )
        elif not isinstance(cls, type):
            raise PluginError(f"{self.kind} {name!r} must be a class, got {cls!r}")
        if settings is not None and (
            not isinstance(cls, str) or REFERENCE.fullmatch(settings) is None
        ):
            raise PluginError(
                f"{self.kind} {name!r}: settings= is a 'module:Class' reference, given with a"
                f" class reference (a class registered as itself has its Settings): {settings!r}"
            )
        if name in self._classes:
            raise DuplicatePluginNameError(f"{self.kind} {name!r} registered twice by one plugin")
        self._classes[name] = (cls, settings)

    @property
    def contributed(self) -> Mapping[str, tuple[type[Any] | str, str | None]]:
        """What was registered through this registrar, by name: the class or its reference,
        and its settings reference."""
        return self._classes
