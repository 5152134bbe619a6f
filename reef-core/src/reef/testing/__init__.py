"""Helpers for testing Reef and its plugins the way Reef tests itself.

What a recipe's own tests import, beside ``reef``:

- :func:`inline_plugin` builds a plugin in a test, so that a stage or recipe under test is
  registered in-process exactly as an installed distribution's would be;
  :func:`write_distribution` writes an installed distribution (a ``dist-info`` with entry
  points) to test discovery without building anything::

    plugins = Plugins(blocked=())
    plugins.register(inline_plugin(record2sample={"MySamples": MySamples}), "mine")
    assert plugins.resolve(PluginKind.RECORD2SAMPLE, "MySamples") is MySamples

  :func:`inline_plugins` is that registry in one call (the plugin named ``test``), for a
  test that needs only its own classes.
- :func:`pipeline_context`, :func:`training_pipeline`, :func:`sample_store` and
  :func:`add_upload` (:mod:`reef.testing.pipelines`) run a recipe's stages as the trainer runs
  them, on a real sample store; :class:`Database`, :class:`TrainingPipeline` and
  :class:`TrainerSamples` are their types, for annotations.
- :mod:`reef.testing.storage`: the ``storage_database`` fixture (SQLite, and PostgreSQL when
  ``REEF_TEST_DATABASE_URL`` names one). ``reef.testing`` is a pytest plugin that brings these
  fixtures to a suite that asks for them, and to no other: write
  ``pytest_plugins = ["reef.testing"]`` in the suite's top ``conftest.py``, or run
  ``pytest -p reef.testing``.
- :mod:`reef.testing.records`: calls of a conversation and the reports that score them.
- :mod:`reef.testing.components`: a training component that records what it was given.
- :mod:`reef.testing.service` and :mod:`reef.testing.engines` (with the ``server`` extra): the
  service on a loopback port, and a scripted OpenAI-compatible engine.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reef.hookspecs import hookimpl
from reef.plugins import ENTRY_POINT_GROUP, PluginRegistrar, Plugins
from reef.storage import Database, TrainerSamples
from reef.testing.pipelines import add_upload, pipeline_context, sample_store, training_pipeline
from reef.train.pipeline import TrainingPipeline

#: As a pytest plugin (``-p reef.testing``, or a conftest's ``pytest_plugins``), this module
#: brings the storage fixtures; pytest reads this name, so importing it costs nothing here.
pytest_plugins = ["reef.testing.storage"]

__all__ = [
    "ENTRY_POINT_GROUP",
    "Database",
    "InlinePlugin",
    "TrainerSamples",
    "TrainingPipeline",
    "add_upload",
    "inline_plugin",
    "inline_plugins",
    "pipeline_context",
    "sample_store",
    "training_pipeline",
    "write_distribution",
]

_Classes = Mapping[str, type[Any]]


class InlinePlugin:
    """A plugin made of classes given by kind; see :func:`inline_plugin`."""

    def __init__(
        self,
        *,
        recipes: _Classes,
        record2sample: _Classes,
        sample2job: _Classes,
        task_generators: _Classes,
        components: _Classes,
        extensions: _Classes,
    ) -> None:
        self._recipes = dict(recipes)
        self._record2sample = dict(record2sample)
        self._sample2job = dict(sample2job)
        self._task_generators = dict(task_generators)
        self._components = dict(components)
        self._extensions = dict(extensions)

    @staticmethod
    def _register(registry: PluginRegistrar, classes: _Classes) -> None:
        for name, cls in classes.items():
            registry.register(name, cls)

    @hookimpl
    def reef_register_recipes(self, registry: PluginRegistrar) -> None:
        self._register(registry, self._recipes)

    @hookimpl
    def reef_register_record2sample(self, registry: PluginRegistrar) -> None:
        self._register(registry, self._record2sample)

    @hookimpl
    def reef_register_sample2job(self, registry: PluginRegistrar) -> None:
        self._register(registry, self._sample2job)

    @hookimpl
    def reef_register_task_generators(self, registry: PluginRegistrar) -> None:
        self._register(registry, self._task_generators)

    @hookimpl
    def reef_register_components(self, registry: PluginRegistrar) -> None:
        self._register(registry, self._components)

    @hookimpl
    def reef_register_extensions(self, registry: PluginRegistrar) -> None:
        self._register(registry, self._extensions)


def inline_plugin(
    *,
    recipes: _Classes | None = None,
    record2sample: _Classes | None = None,
    sample2job: _Classes | None = None,
    task_generators: _Classes | None = None,
    components: _Classes | None = None,
    extensions: _Classes | None = None,
) -> InlinePlugin:
    """A plugin object contributing the given classes (name -> class) of each kind, for
    :meth:`reef.plugins.Plugins.register`."""
    return InlinePlugin(
        recipes=recipes or {},
        record2sample=record2sample or {},
        sample2job=sample2job or {},
        task_generators=task_generators or {},
        components=components or {},
        extensions=extensions or {},
    )


def inline_plugins(**classes: _Classes) -> Plugins:
    """A plugin registry that loads no installed distribution and holds one
    :func:`inline_plugin` of ``classes`` (its keywords), registered as ``test``."""
    registry = Plugins(blocked=())
    registry.register(inline_plugin(**classes), "test")
    return registry


def write_distribution(
    root: Path,
    *,
    name: str,
    version: str,
    plugins: Mapping[str, str],
    modules: Mapping[str, str],
) -> Path:
    """Write an installed distribution into ``root`` (a folder to put on ``sys.path``): its
    modules (relative path -> source) and a ``dist-info`` folder whose entry points in the
    ``reef.plugins`` group are ``plugins`` (name -> module). ``importlib.metadata`` finds it
    like any installed distribution, so discovery is tested for real. Returns ``root``.
    """
    for relative, source in modules.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source), encoding="utf-8")
    info = root / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8"
    )
    lines = "".join(f"{plugin} = {module}\n" for plugin, module in plugins.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}", encoding="utf-8")
    return root
