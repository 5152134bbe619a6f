"""Plugin discovery: :class:`Plugins` loads the ``reef.plugins`` entry points.

Nothing loads at import time. :meth:`Plugins.load` reads the entry points (reef-core registers
its own built-in stages through the same path, as ``core``, see :mod:`reef.plugins.builtin`),
records what each plugin's discovery hooks contribute, and can be called again to pick up
distributions installed since. A plugin missing an optional dependency is skipped with a log
line; any other failure to import names the entry point and fails.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import logging
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import attrs
import pluggy

from reef import hookspecs
from reef.core.plugins import NoSettings, PluginSettings
from reef.plugins.builtin import built_in_components, built_in_trackers
from reef.plugins.registrar import (
    DuplicatePluginNameError,
    PluginKind,
    PluginLoadError,
    PluginRegistrar,
    Registration,
    UnknownPluginError,
    import_reference,
)

if TYPE_CHECKING:
    from reef.core.job_data import JobData, JobOutcome

#: The one entry-point group through which a distribution makes its plugin known.
ENTRY_POINT_GROUP = "reef.plugins"
#: Names of plugins (entry-point names) not to load, comma-separated: ``sft,ecc``.
BLOCK_ENV_VAR = "REEF_BLOCK_PLUGINS"

_log = logging.getLogger(__name__)

_DISCOVERY_HOOKS: Mapping[str, PluginKind] = {
    "reef_register_recipes": PluginKind.RECIPE,
    "reef_register_record2sample": PluginKind.RECORD2SAMPLE,
    "reef_register_sample2job": PluginKind.SAMPLE2JOB,
    "reef_register_task_generators": PluginKind.TASK_GENERATOR,
    "reef_register_components": PluginKind.COMPONENT,
    "reef_register_extensions": PluginKind.EXTENSION,
    "reef_register_trackers": PluginKind.TRACKER,
}


#: Each kind as a message names it, and where a deployment names a class of it.
_KIND_WORDS: Mapping[PluginKind, str] = {
    PluginKind.RECIPE: "recipe",
    PluginKind.RECORD2SAMPLE: "record-to-sample stage",
    PluginKind.SAMPLE2JOB: "sample-to-job stage",
    PluginKind.TASK_GENERATOR: "task generator",
    PluginKind.COMPONENT: "training component",
    PluginKind.EXTENSION: "extension",
    PluginKind.TRACKER: "experiment tracker",
}
_KIND_PLACES: Mapping[PluginKind, str] = {
    PluginKind.RECIPE: "scenarios.<name>.recipe",
    PluginKind.RECORD2SAMPLE: "scenarios.<name>.pipeline.record2sample.class",
    PluginKind.SAMPLE2JOB: "scenarios.<name>.pipeline.sample2job.class",
    PluginKind.TASK_GENERATOR: "the generator key of a generated-task stage's config",
    PluginKind.COMPONENT: "scenarios.<name>.training.component",
    PluginKind.EXTENSION: "scenarios.<name>.extensions",
    PluginKind.TRACKER: "trackers",
}


@attrs.frozen
class FailedPlugin:
    """A plugin skipped because its entry point could not import a dependency."""

    name: str
    entry_point: str
    distribution: str | None
    version: str | None
    error: str


@attrs.frozen
class LoadedPlugin:
    """A plugin that is registered, whatever it contributes (maybe nothing yet)."""

    name: str
    distribution: str | None
    version: str | None


def blocked_from_environ(environ: Mapping[str, str]) -> frozenset[str]:
    """The plugin names that ``REEF_BLOCK_PLUGINS`` (comma-separated) blocks."""
    return frozenset(n.strip() for n in environ.get(BLOCK_ENV_VAR, "").split(",") if n.strip())


def _normalized(distribution: str) -> str:
    """A distribution's name as pip compares it: ``Reef_Recipes.SFT`` is ``reef-recipes-sft``."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _dist_of(entry_point: importlib.metadata.EntryPoint) -> tuple[str | None, str | None]:
    dist = entry_point.dist
    if dist is None:
        return None, None
    return dist.metadata["Name"], dist.version


class Plugins:
    """The plugins of one Reef process: what they registered, and the event hooks to call.

    Nothing loads at import time: :meth:`load` reads the ``reef.plugins`` entry points (reef-core
    registers its own built-in stages through the same path, as ``core``) and can be called
    again to pick up distributions installed since; a plugin already loaded is skipped. An entry
    point names a module of hook functions, or a class whose instance (one per ``Plugins``)
    holds hook methods and whatever state the plugin keeps.
    """

    def __init__(self, *, blocked: Iterable[str] | None = None) -> None:
        """:param blocked: plugin names not to load; by default ``REEF_BLOCK_PLUGINS``."""
        self.blocked = frozenset(blocked_from_environ(os.environ) if blocked is None else blocked)
        self._pm = pluggy.PluginManager(hookspecs.PROJECT_NAME)
        self._pm.add_hookspecs(hookspecs)
        self._registrations: dict[tuple[PluginKind, str], Registration] = {}
        self._failures: dict[str, FailedPlugin] = {}
        self._loaded: dict[str, LoadedPlugin] = {}
        # Every plugin name met, blocked or not, with its distribution: what a block can name.
        self._names: dict[str, str | None] = {}

    # -- loading ---------------------------------------------------------------------------

    def load(self) -> None:
        """Load every ``reef.plugins`` entry point not blocked and not loaded yet.

        A plugin whose import, or whose discovery hooks, miss a module other than its own (an
        optional dependency that is not installed) is skipped with a log line and listed in
        :attr:`failures`.

        :raises PluginLoadError: naming the entry point and its distribution, for any other
            failure to import or to register its classes.
        :raises DuplicatePluginNameError: naming both distributions.
        """
        for entry_point in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            name = entry_point.name
            distribution, version = _dist_of(entry_point)
            self._names[name] = distribution
            if name in self.blocked or self._pm.has_plugin(name):
                continue
            where = f"entry point {name} = {entry_point.value!r} of {distribution} {version}"
            try:
                plugin = entry_point.load()
            except ModuleNotFoundError as exc:
                self._skip_for_missing_dependency(entry_point, where, distribution, version, exc)
                continue
            except Exception as exc:
                raise PluginLoadError(f"{where} failed to import: {exc!r}") from exc
            if isinstance(plugin, type):
                # An entry point that names a class gets an instance per Plugins, so a plugin
                # with state (the seals of its scenarios) keeps it on itself, never shared.
                try:
                    plugin = plugin()
                except Exception as exc:
                    raise PluginLoadError(f"{where} failed to start: {exc!r}") from exc
            self._failures.pop(name, None)
            try:
                self.register(plugin, name, distribution=distribution, version=version)
            except ModuleNotFoundError as exc:  # a hook that imports its classes when called
                self._skip_for_missing_dependency(entry_point, where, distribution, version, exc)
            except DuplicatePluginNameError:
                raise
            except Exception as exc:
                raise PluginLoadError(f"{where} failed to register its classes: {exc}") from exc

    def _skip_for_missing_dependency(
        self,
        entry_point: importlib.metadata.EntryPoint,
        where: str,
        distribution: str | None,
        version: str | None,
        exc: ModuleNotFoundError,
    ) -> None:
        """List the plugin in :attr:`failures` when the module ``exc`` misses is another
        distribution's (a dependency not installed).

        :raises PluginLoadError: when it is the plugin's own module.
        """
        if exc.name is None or exc.name.split(".")[0] == entry_point.module.split(".")[0]:
            raise PluginLoadError(f"{where} failed to import: {exc}") from exc
        name = entry_point.name
        _log.warning("skipping plugin %s: %s (missing dependency %s)", name, where, exc.name)
        self._failures[name] = FailedPlugin(
            name, entry_point.value, distribution, version, f"missing module {exc.name!r}"
        )

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
        self._names[name] = distribution
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
        self._loaded[name] = LoadedPlugin(name, distribution, version)

    def unregister(self, name: str) -> None:
        """Forget the plugin ``name`` and every class it registered."""
        self._pm.unregister(name=name)
        self._loaded.pop(name, None)
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
                for class_name, (cls, settings) in registrar.contributed.items():
                    new = Registration(
                        kind, class_name, cls, name, distribution, version, settings=settings
                    )
                    old = self._registrations.get((kind, class_name))
                    if old is not None:
                        raise DuplicatePluginNameError(
                            f"{kind} {class_name!r} is registered by both {old.provider}"
                            f" (plugin {old.plugin}) and {new.provider} (plugin {name});"
                            f" uninstall one, or block one with {BLOCK_ENV_VAR}"
                        )
                    added[(kind, class_name)] = new
        return added

    def unmatched_blocks(self) -> str | None:
        """What is wrong when ``blocked`` names a plugin never met (a typo, or a distribution's
        name): those names block nothing. ``None`` when every name blocks a plugin."""
        unmatched = sorted(self.blocked - self._names.keys())
        if not unmatched:
            return None
        parts = [
            f"{BLOCK_ENV_VAR} names {', '.join(unmatched)}, which no installed plugin is called,"
            " so they block nothing"
        ]
        for name in unmatched:
            provided = sorted(
                n for n, d in self._names.items() if d and _normalized(d) == _normalized(name)
            )
            if provided:
                parts.append(
                    f"{name} is a distribution: block its plugins by their names,"
                    f" {', '.join(provided)}"
                )
        parts.append(f"the plugins it can block: {', '.join(sorted(self._names)) or 'none'}")
        return "; ".join(parts)

    # -- what is registered ----------------------------------------------------------------

    def plugin(self, name: str) -> object | None:
        """The plugin registered as ``name``: the module its entry point names, or the instance
        of the class it names (made for this ``Plugins``); ``None`` when there is none."""
        found: object | None = self._pm.get_plugin(name)
        return found

    @property
    def registrations(self) -> tuple[Registration, ...]:
        """Every registered class, by kind then name."""
        return tuple(sorted(self._registrations.values(), key=lambda r: (r.kind, r.name)))

    @property
    def loaded(self) -> tuple[LoadedPlugin, ...]:
        """Every registered plugin, by name, including one that contributes no class."""
        return tuple(self._loaded[n] for n in sorted(self._loaded))

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
        ``module:Class`` reference (``Class`` may be dotted). A class registered by reference
        is imported here, the first time.

        :raises UnknownPluginError: listing the installed names of ``kind``.
        :raises PluginLoadError: when a class registered by reference does not import.
        """
        if ":" in name:
            return _import_reference(kind, name, self.names(kind))
        return self.registered(kind, name).load()

    def settings_of(self, kind: PluginKind, name: str) -> tuple[str, type[PluginSettings]]:
        """The name errors give the class ``name`` means, and its settings class, importing
        the class itself only when its registration names no settings reference (what
        reading a deployment needs of a component, without its PyTorch).

        :raises UnknownPluginError: as :meth:`resolve`.
        :raises TypeError: when the class's ``Settings`` does not extend ``PluginSettings``.
        """
        if ":" not in name:
            registration = self.registered(kind, name)
            settings = registration.settings_class()
            if settings is not None:
                if not issubclass(settings, PluginSettings):
                    raise TypeError(f"{registration.settings} must extend PluginSettings")
                return registration.reference.rpartition(":")[2].rpartition(".")[2], settings
        cls = self.resolve(kind, name)
        return cls.__name__, settings_class_of(cls)

    def registered(self, kind: PluginKind, name: str) -> Registration:
        """The registration of ``name`` for ``kind``.

        :raises UnknownPluginError: listing the installed names of ``kind``, with the nearest
            name, or the kind it is registered under instead.
        """
        registration = self._registrations.get((kind, name))
        if registration is not None:
            return registration
        installed = self.names(kind)
        listed = ", ".join(installed) if installed else "none"
        elsewhere = [k for k in PluginKind if (k, name) in self._registrations]
        if elsewhere:
            other = elsewhere[0]
            raise UnknownPluginError(
                kind,
                name,
                installed,
                f"{name!r} is a {_KIND_WORDS[other]}, not a {_KIND_WORDS[kind]}: name it under"
                f" {_KIND_PLACES[other]} (installed {kind} names: {listed})",
            )
        close = difflib.get_close_matches(name, installed, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownPluginError(
            kind,
            name,
            installed,
            f"unknown {kind} {name!r}{hint} (installed {kind} names: {listed};"
            f" or write module:Class){self._why_missing(kind, name)}",
        )

    def _why_missing(self, kind: PluginKind, name: str) -> str:
        """What may keep ``name`` from being registered: a built-in component's or tracker's
        missing extra, or plugins that ``REEF_BLOCK_PLUGINS`` blocks."""
        built_in = {
            PluginKind.COMPONENT: ("component", built_in_components),
            PluginKind.TRACKER: ("tracker", built_in_trackers),
        }
        if kind in built_in and "core" not in self.blocked:
            word, listed = built_in[kind]
            for missing in listed()[1]:
                if missing.name == name:
                    return (
                        f"; the built-in {word} {name!r} needs the"
                        f" {missing.missing} package, which is not installed: {missing.install}"
                    )
        if self.blocked:
            return (
                f"; {BLOCK_ENV_VAR} blocks the plugins {', '.join(sorted(self.blocked))}, whose"
                f" names are not loaded: take the one that provides {name!r} out of"
                f" {BLOCK_ENV_VAR}"
            )
        return ""

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
    try:
        target = import_reference(reference)
    except (ImportError, AttributeError) as exc:
        raise UnknownPluginError(
            kind, reference, installed, f"cannot import {kind} {reference!r}: {exc}"
        ) from exc
    if not isinstance(target, type):
        raise UnknownPluginError(
            kind, reference, installed, f"{kind} {reference!r} is not a class: {target!r}"
        )
    return target


def settings_class_of(plugin_class: type[Any]) -> type[PluginSettings]:
    """The settings class a plugin class declares as ``Settings``; a class that declares none
    takes no config (:class:`NoSettings`)."""
    settings = getattr(plugin_class, "Settings", NoSettings)
    if not (isinstance(settings, type) and issubclass(settings, PluginSettings)):
        raise TypeError(f"{plugin_class.__name__}.Settings must extend PluginSettings")
    return settings
