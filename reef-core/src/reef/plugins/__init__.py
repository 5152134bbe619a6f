"""Plugin discovery: the floor above the hook specs that finds and loads Reef's plugins.

- :class:`Plugins` loads every ``reef.plugins`` entry point (:data:`ENTRY_POINT_GROUP`) not
  blocked by :data:`BLOCK_ENV_VAR`, records what each plugin registers and calls the event hooks;
- :class:`PluginRegistrar` is what a discovery hook receives, bound to one :class:`PluginKind`;
- :mod:`reef.plugins.builtin` is reef-core's own plugin (entry point ``core``);
- :mod:`reef.plugins.scenarios` resolves what a deployment's scenarios name, and loads a
  deployment file.

A plugin author imports none of this directly: ``from reef import hookimpl, PluginRegistrar``.
"""

from reef.plugins.manager import (
    BLOCK_ENV_VAR,
    ENTRY_POINT_GROUP,
    FailedPlugin,
    LoadedPlugin,
    Plugins,
    blocked_from_environ,
)
from reef.plugins.registrar import (
    DuplicatePluginNameError,
    PluginError,
    PluginKind,
    PluginLoadError,
    PluginRegistrar,
    Registration,
    UnknownPluginError,
)

__all__ = [
    "BLOCK_ENV_VAR",
    "ENTRY_POINT_GROUP",
    "DuplicatePluginNameError",
    "FailedPlugin",
    "LoadedPlugin",
    "PluginError",
    "PluginKind",
    "PluginLoadError",
    "PluginRegistrar",
    "Plugins",
    "Registration",
    "UnknownPluginError",
    "blocked_from_environ",
]
