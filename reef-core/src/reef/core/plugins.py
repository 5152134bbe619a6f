"""Plugins: the settings every stage parses, and the errors a bad configuration raises.

A stage never reads a raw mapping. It declares its keys as a frozen attrs class that extends
:class:`PluginSettings` (fields made with :func:`reef.core.config.config_option`) and parses its
config with ``Settings.parse(config, plugin_class=cls)``, which refuses an unknown key (with the
closest valid one), a wrong type or a bad value, reporting every problem at once.
"""

from __future__ import annotations

import difflib
import enum
import importlib
import importlib.metadata
import logging
import os
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

import attrs
import cattrs
import pluggy
from cattrs.errors import CattrsError

from reef import hookspecs
from reef.core.config import config_option, option_help, option_key
from reef.core.converters import describe, describe_exception, make_converter

if TYPE_CHECKING:
    from reef.core.job_data import JobData, JobOutcome

# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------


class PluginConfigError(ValueError):
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


def _strict(kind: type[Any], accepted: tuple[type[Any], ...]) -> Any:
    # cattrs coerces ("3" -> 3, 2.7 -> 2); a configuration key of the wrong type is a mistake
    # the user must see, so scalars structure only from values of their own type.
    def structure(value: Any, _: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {kind.__name__}, got bool {value!r}")
        if not isinstance(value, accepted):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        return kind(value)

    return structure


def _settings_converter() -> cattrs.Converter:
    converter = make_converter()
    converter.register_structure_hook(int, _strict(int, (int,)))
    converter.register_structure_hook(float, _strict(float, (int, float)))
    converter.register_structure_hook(str, _strict(str, (str,)))
    converter.register_structure_hook(bool, _strict(bool, (bool,)))
    return converter


_CONVERTER = _settings_converter()


def _unknown_key_reason(key: str, valid: Sequence[str]) -> str:
    if not valid:
        return f"unknown key {key!r}: this plugin takes no keys"
    close = difflib.get_close_matches(key, valid, n=1)
    if close:
        return f"unknown key {key!r}, did you mean {close[0]!r}?"
    return f"unknown key {key!r}; valid keys: {', '.join(sorted(valid))}"


def _split_described(line: str) -> tuple[str, str]:
    """A line of :func:`describe` (``<reason> @ <path>``) as a (path, reason) pair."""
    reason, _, key = line.rpartition(" @ ")
    return key, reason


@attrs.frozen
class PluginSettings:
    """The base of every plugin's settings: a frozen attrs class parsed from a raw mapping."""

    @classmethod
    def parse(
        cls,
        config: Mapping[str, Any] | None,
        *,
        plugin_class: type[Any],
        path: str = "$",
    ) -> Self:
        """Structure ``config`` (a mapping from the deployment; ``None`` reads as ``{}``).

        :param plugin_class: the plugin (stage, recipe) that owns these settings; errors name it.
        :param path: where ``config`` sits in its document, the prefix of every error's key.
        :raises PluginConfigError: listing every unknown key (with the closest valid one), every
            missing required key, every value of the wrong type and every value a validator
            refuses, each at its own path.
        """
        problems: list[tuple[str, str]] = []
        settings = cls.structure_at(config, path, problems)
        if settings is None:
            plugin = plugin_class.__name__
            raise PluginConfigError.of([PluginConfigError(plugin, k, r) for k, r in problems])
        return settings

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


def _structure_value(value: object, type_: Any, path: str, problems: list[tuple[str, str]]) -> Any:
    """Structure one value; sections (settings classes, optional or in a mapping by name) are
    structured key by key so that their unknown keys get suggestions too."""
    args = typing.get_args(type_)
    if typing.get_origin(type_) in (types.UnionType, typing.Union) and type(None) in args:
        if value is None:
            return None
        rest = [a for a in args if a is not type(None)]
        section = _settings_class(rest[0]) if len(rest) == 1 else None
        if section is not None:
            return section.structure_at(value, path, problems)
    section = _settings_class(type_)
    if section is not None:
        return section.structure_at(value, path, problems)
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
        problems.extend(_split_described(line) for line in describe(exc, root=path))
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


# --------------------------------------------------------------------------------------------
# discovery
# --------------------------------------------------------------------------------------------

#: The one entry-point group through which a distribution makes its plugin known.
ENTRY_POINT_GROUP = "reef.plugins"
#: Names of plugins (entry-point names) not to load, comma-separated: ``sft,ecc``.
BLOCK_ENV_VAR = "REEF_BLOCK_PLUGINS"

_log = logging.getLogger(__name__)


class PluginKind(enum.StrEnum):
    """What a registered class is: the kinds a deployment names a class of."""

    RECIPE = "recipe"
    RECORD2SAMPLE = "record2sample"
    SAMPLE2JOB = "sample2job"
    TASK_GENERATOR = "task_generator"
    COMPONENT = "component"
    EXTENSION = "extension"


_DISCOVERY_HOOKS: Mapping[str, PluginKind] = {
    "reef_register_recipes": PluginKind.RECIPE,
    "reef_register_record2sample": PluginKind.RECORD2SAMPLE,
    "reef_register_sample2job": PluginKind.SAMPLE2JOB,
    "reef_register_task_generators": PluginKind.TASK_GENERATOR,
    "reef_register_components": PluginKind.COMPONENT,
    "reef_register_extensions": PluginKind.EXTENSION,
}


class PluginError(Exception):
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


@attrs.frozen
class FailedPlugin:
    """A plugin skipped because its entry point could not import a dependency."""

    name: str
    entry_point: str
    distribution: str | None
    version: str | None
    error: str


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


def blocked_from_environ(environ: Mapping[str, str]) -> frozenset[str]:
    """The plugin names that ``REEF_BLOCK_PLUGINS`` (comma-separated) blocks."""
    return frozenset(n.strip() for n in environ.get(BLOCK_ENV_VAR, "").split(",") if n.strip())


def _dist_of(entry_point: importlib.metadata.EntryPoint) -> tuple[str | None, str | None]:
    dist = entry_point.dist
    if dist is None:
        return None, None
    return dist.metadata["Name"], dist.version


class Plugins:
    """The plugins of one Reef process: what they registered, and the event hooks to call.

    Nothing loads at import time: :meth:`load` reads the ``reef.plugins`` entry points (reef-core
    registers its own built-in stages through the same path, as ``core``) and can be called
    again to pick up distributions installed since; a plugin already loaded is skipped.
    """

    def __init__(self, *, blocked: Iterable[str] | None = None) -> None:
        """:param blocked: plugin names not to load; by default ``REEF_BLOCK_PLUGINS``."""
        self.blocked = frozenset(blocked_from_environ(os.environ) if blocked is None else blocked)
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._registrations: dict[tuple[PluginKind, str], Registration] = {}
        self._failures: dict[str, FailedPlugin] = {}

    # -- loading ---------------------------------------------------------------------------

    def load(self) -> None:
        """Load every ``reef.plugins`` entry point not blocked and not loaded yet.

        A plugin whose import misses a module other than its own (an optional dependency that
        is not installed) is skipped with a log line and listed in :attr:`failures`.

        :raises PluginLoadError: naming the entry point and its distribution, for any other
            failure to import.
        :raises DuplicatePluginNameError: naming both distributions.
        """
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            name = entry_point.name
            if name in self.blocked or self._pm.has_plugin(name):
                continue
            distribution, version = _dist_of(entry_point)
            where = f"entry point {name} = {entry_point.value!r} of {distribution} {version}"
            try:
                plugin = entry_point.load()
            except ModuleNotFoundError as exc:
                if exc.name is None or exc.name.split(".")[0] == entry_point.module.split(".")[0]:
                    raise PluginLoadError(f"{where} failed to import: {exc}") from exc
                _log.warning(
                    "skipping plugin %s: %s (missing dependency %s)", name, where, exc.name
                )
                self._failures[name] = FailedPlugin(
                    name, entry_point.value, distribution, version, f"missing module {exc.name!r}"
                )
                continue
            except Exception as exc:
                raise PluginLoadError(f"{where} failed to import: {exc!r}") from exc
            self._failures.pop(name, None)
            self.register(plugin, name, distribution=distribution, version=version)

    def register(
        self,
        plugin: object,
        name: str,
        *,
        distribution: str | None = None,
        version: str | None = None,
    ) -> None:
        """Register ``plugin`` (a module or object with hook implementations) as ``name`` and
        record the classes its discovery hooks contribute. Either all of them are recorded or,
        on an error, none and the plugin is not registered.

        :raises DuplicatePluginNameError: a name of a kind that another plugin registered.
        """
        if name in self.blocked:
            return
        self._pm.register(plugin, name=name)
        try:
            self._pm.check_pending()
            added = self._discover(plugin, name, distribution, version)
        except BaseException:
            self._pm.unregister(name=name)
            raise
        self._registrations.update(added)

    def unregister(self, name: str) -> None:
        """Forget the plugin ``name`` and every class it registered."""
        self._pm.unregister(name=name)
        self._registrations = {k: r for k, r in self._registrations.items() if r.plugin != name}

    def _discover(
        self, plugin: object, name: str, distribution: str | None, version: str | None
    ) -> dict[tuple[PluginKind, str], Registration]:
        added: dict[tuple[PluginKind, str], Registration] = {}
        for hook_name, kind in _DISCOVERY_HOOKS.items():
            for impl in getattr(self._pm.hook, hook_name).get_hookimpls():
                if impl.plugin is not plugin:
                    continue
                registrar = PluginRegistrar(kind)
                # Called for this plugin alone, so each contribution is known to be its own.
                impl.function(*(registrar for _ in impl.argnames))
                for class_name, cls in registrar.contributed.items():
                    new = Registration(kind, class_name, cls, name, distribution, version)
                    old = self._registrations.get((kind, class_name))
                    if old is not None:
                        raise DuplicatePluginNameError(
                            f"{kind} {class_name!r} is registered by both {old.provider}"
                            f" (plugin {old.plugin}) and {new.provider} (plugin {name});"
                            f" uninstall one, or block one with {BLOCK_ENV_VAR}"
                        )
                    added[(kind, class_name)] = new
        return added

    # -- what is registered ----------------------------------------------------------------

    @property
    def registrations(self) -> tuple[Registration, ...]:
        """Every registered class, by kind then name."""
        return tuple(sorted(self._registrations.values(), key=lambda r: (r.kind, r.name)))

    @property
    def failures(self) -> tuple[FailedPlugin, ...]:
        """The plugins skipped for a missing dependency, by name."""
        return tuple(self._failures[n] for n in sorted(self._failures))

    def names(self, kind: PluginKind) -> tuple[str, ...]:
        """The registered names of ``kind``, sorted."""
        return tuple(sorted(n for k, n in self._registrations if k == kind))

    def registration(self, kind: PluginKind, name: str) -> Registration | None:
        """The registration of ``name`` for ``kind``, if any."""
        return self._registrations.get((kind, name))

    def resolve(self, kind: PluginKind, name: str) -> type[Any]:
        """The class a deployment means by ``name``: a registered name of ``kind``, or a
        ``module:Class`` reference (``Class`` may be dotted).

        :raises UnknownPluginError: listing the installed names of ``kind``.
        """
        installed = self.names(kind)
        if ":" in name:
            return _import_reference(kind, name, installed)
        registration = self._registrations.get((kind, name))
        if registration is not None:
            return registration.cls
        close = difflib.get_close_matches(name, installed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        listed = ", ".join(installed) if installed else "none"
        raise UnknownPluginError(
            kind,
            name,
            installed,
            f"unknown {kind} {name!r}{hint} (installed {kind} names: {listed};"
            " or write module:Class)",
        )

    # -- events (one typed method per event hook) ------------------------------------------

    def scenario_started(self, scenario: str, extensions: Mapping[str, PluginSettings]) -> None:
        """Call :func:`reef.hookspecs.reef_scenario_started`."""
        self._pm.hook.reef_scenario_started(scenario=scenario, extensions=extensions)

    def job_data_built(self, scenario: str, trainer: str, job_data: JobData) -> None:
        """Call :func:`reef.hookspecs.reef_job_data_built`."""
        self._pm.hook.reef_job_data_built(scenario=scenario, trainer=trainer, job_data=job_data)

    def before_submit(self, scenario: str, trainer: str, job_data: JobData) -> JobData:
        """Call :func:`reef.hookspecs.reef_before_submit`: the job data to submit."""
        replaced: JobData | None = self._pm.hook.reef_before_submit(
            scenario=scenario, trainer=trainer, job_data=job_data
        )
        return job_data if replaced is None else replaced

    def job_provenance(self, scenario: str, trainer: str, job_data: JobData) -> dict[str, Any]:
        """Call :func:`reef.hookspecs.reef_job_provenance`: every plugin's entries, merged.

        :raises ValueError: when two plugins report under the same extension name.
        """
        results: list[Mapping[str, Any]] = self._pm.hook.reef_job_provenance(
            scenario=scenario, trainer=trainer, job_data=job_data
        )
        return _merged(scenario, "provenance", results)

    def job_ended(self, scenario: str, trainer: str, outcome: JobOutcome) -> None:
        """Call :func:`reef.hookspecs.reef_job_ended`."""
        self._pm.hook.reef_job_ended(scenario=scenario, trainer=trainer, outcome=outcome)

    def scenario_status(self, scenario: str) -> dict[str, Any]:
        """Call :func:`reef.hookspecs.reef_scenario_status`: every plugin's entries, merged.

        :raises ValueError: when two plugins report under the same extension name.
        """
        results: list[Mapping[str, Any]] = self._pm.hook.reef_scenario_status(scenario=scenario)
        return _merged(scenario, "status", results)


def _merged(scenario: str, what: str, results: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The plugins' results of a hook, each ``{<extension name>: ...}``, as one mapping.

    :raises ValueError: when two plugins report under the same extension name.
    """
    merged: dict[str, Any] = {}
    for result in results:
        twice = sorted(set(result) & set(merged))
        if twice:
            raise ValueError(f"scenario {scenario!r}: two plugins report {what} under {twice}")
        merged.update(result)
    return dict(sorted(merged.items()))


def _import_reference(kind: PluginKind, reference: str, installed: Sequence[str]) -> type[Any]:
    module_name, _, qualname = reference.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise UnknownPluginError(
            kind, reference, installed, f"cannot import {kind} {reference!r}: {exc}"
        ) from exc
    if not isinstance(target, type):
        raise UnknownPluginError(
            kind, reference, installed, f"{kind} {reference!r} is not a class: {target!r}"
        )
    return target
