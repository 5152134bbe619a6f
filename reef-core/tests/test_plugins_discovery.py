"""Plugin discovery through real (temporary) distributions: names, duplicates, blocking,
failures, and resolution of names and module:Class references."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from reef.plugins import (
    BLOCK_ENV_VAR,
    DuplicatePluginNameError,
    PluginKind,
    PluginLoadError,
    Plugins,
    UnknownPluginError,
    blocked_from_environ,
)
from reef.testing import inline_plugin, write_distribution

PLUGIN_SOURCE = """
from reef import hookimpl

class {cls}:
    pass

@hookimpl
def reef_register_record2sample(registry):
    registry.register("{name}", {cls})
"""


def install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dist: str, plugin: str, source: str
) -> None:
    module = f"{plugin}_{tmp_path.name.replace('-', '_')}"
    root = write_distribution(
        tmp_path / dist,
        name=dist,
        version="1.2.3",
        plugins={plugin: module},
        modules={f"{module}.py": source},
    )
    monkeypatch.syspath_prepend(str(root))


def test_a_name_records_kind_class_distribution_and_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(
        tmp_path,
        monkeypatch,
        "acme-stages",
        "acme",
        PLUGIN_SOURCE.format(cls="Acme", name="AcmeSamples"),
    )
    plugins = Plugins(blocked=())
    plugins.load()
    registration = plugins.registration(PluginKind.RECORD2SAMPLE, "AcmeSamples")
    assert registration is not None
    assert (registration.plugin, registration.distribution, registration.version) == (
        "acme",
        "acme-stages",
        "1.2.3",
    )
    assert plugins.resolve(PluginKind.RECORD2SAMPLE, "AcmeSamples") is registration.cls
    # Loading again is explicit and repeatable: nothing registers twice.
    plugins.load()
    assert plugins.names(PluginKind.RECORD2SAMPLE).count("AcmeSamples") == 1


def test_a_duplicate_name_names_both_distributions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(
        tmp_path, monkeypatch, "first-dist", "first", PLUGIN_SOURCE.format(cls="A", name="Twin")
    )
    install(
        tmp_path, monkeypatch, "second-dist", "second", PLUGIN_SOURCE.format(cls="B", name="Twin")
    )
    plugins = Plugins(blocked=())
    with pytest.raises(DuplicatePluginNameError) as info:
        plugins.load()
    assert "first-dist 1.2.3" in str(info.value)
    assert "second-dist 1.2.3" in str(info.value)
    # The plugin that collided left nothing behind: only the one loaded first is registered.
    kept = plugins.registration(PluginKind.RECORD2SAMPLE, "Twin")
    assert kept is not None
    assert {r.plugin for r in plugins.registrations} & {"first", "second"} == {kept.plugin}


def test_a_blocked_plugin_is_not_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(
        tmp_path,
        monkeypatch,
        "blocked-dist",
        "blockme",
        PLUGIN_SOURCE.format(cls="C", name="Blocked"),
    )
    monkeypatch.setenv(BLOCK_ENV_VAR, "blockme, other")
    plugins = Plugins()
    plugins.load()
    assert plugins.blocked == {"blockme", "other"}
    assert "Blocked" not in plugins.names(PluginKind.RECORD2SAMPLE)
    assert blocked_from_environ({BLOCK_ENV_VAR: " a,,b "}) == {"a", "b"}


def test_a_block_that_names_no_plugin_says_so_and_which_names_to_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(
        tmp_path, monkeypatch, "Acme_Stages", "acme", PLUGIN_SOURCE.format(cls="A", name="Acme")
    )
    # The distribution's name (spelled as pip would take it) and a typo block nothing.
    plugins = Plugins(blocked={"acme-stages", "acmee"})
    plugins.load()
    assert "Acme" in plugins.names(PluginKind.RECORD2SAMPLE)
    problem = plugins.unmatched_blocks()
    assert problem is not None
    assert problem.startswith(
        "REEF_BLOCK_PLUGINS names acme-stages, acmee, which no installed plugin is called, so"
        " they block nothing; acme-stages is a distribution: block its plugins by their names,"
        " acme; the plugins it can block: "
    )
    assert {"acme", "core"} <= set(problem.rpartition(": ")[2].split(", "))
    # A plugin name blocks it, loaded or registered inline, and the problem is gone.
    right = Plugins(blocked={"acme", "inline"})
    right.load()
    right.register(inline_plugin(record2sample={"Inline": object}), "inline")
    assert right.unmatched_blocks() is None
    assert "Acme" not in right.names(PluginKind.RECORD2SAMPLE)


def test_a_missing_optional_dependency_skips_the_plugin_and_lists_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path, monkeypatch, "needs-torch9", "needy", "import torch9_not_installed\n")
    plugins = Plugins(blocked=())
    plugins.load()
    (failed,) = [f for f in plugins.failures if f.name == "needy"]
    assert failed.distribution == "needs-torch9"
    assert failed.version == "1.2.3"
    assert failed.entry_point.startswith("needy_")
    assert "torch9_not_installed" in failed.error


LAZY_HOOK = """
from reef import hookimpl

@hookimpl
def reef_register_recipes(registry):
    {body}
"""


def test_a_hook_that_imports_a_missing_dependency_skips_the_plugin_and_lists_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A discovery hook that imports its classes when called, as reef-recipes-distill's do,
    fails on a dependency that is not installed as an import at the top would: the plugin is
    skipped and listed, and the others load."""
    install(
        tmp_path,
        monkeypatch,
        "lazy-dist",
        "lazy",
        LAZY_HOOK.format(body="import judge9_not_installed"),
    )
    install(tmp_path, monkeypatch, "fine-dist", "fine", PLUGIN_SOURCE.format(cls="F", name="Fine"))
    plugins = Plugins(blocked=())
    plugins.load()
    (failed,) = [f for f in plugins.failures if f.name == "lazy"]
    assert (failed.distribution, failed.error) == (
        "lazy-dist",
        "missing module 'judge9_not_installed'",
    )
    assert "lazy" not in {p.name for p in plugins.loaded}
    assert "Fine" in plugins.names(PluginKind.RECORD2SAMPLE)


@pytest.mark.parametrize(
    ("source", "failure"),
    [
        ("raise RuntimeError('boom')\n", "failed to import: RuntimeError('boom')"),
        (
            LAZY_HOOK.format(body="raise RuntimeError('boom')"),
            "failed to register its classes: boom",
        ),
        (
            LAZY_HOOK.format(body="registry.register('odd', object())"),
            "failed to register its classes: recipe 'odd' must be a class",
        ),
    ],
    ids=["import", "hook", "registration"],
)
def test_any_other_failure_raises_naming_entry_point_and_distribution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, failure: str
) -> None:
    """A plugin that fails to import, or whose discovery hook fails, stops the load with a
    message naming its entry point and distribution; nothing of it is registered."""
    install(tmp_path, monkeypatch, "broken-dist", "broken", source)
    plugins = Plugins(blocked=())
    with pytest.raises(PluginLoadError) as info:
        plugins.load()
    message = str(info.value)
    assert "entry point broken = 'broken_" in message
    assert f"broken-dist 1.2.3 {failure}" in message
    assert "broken" not in {p.name for p in plugins.loaded}


def test_an_unknown_name_lists_the_installed_names_of_its_kind() -> None:
    class MySamples:
        pass

    plugins = Plugins(blocked=())
    plugins.register(inline_plugin(record2sample={"MySamples": MySamples}), "mine")
    with pytest.raises(UnknownPluginError) as info:
        plugins.resolve(PluginKind.RECORD2SAMPLE, "MySample")
    assert info.value.installed == ("MySamples",)
    assert "did you mean 'MySamples'" in str(info.value)
    assert "installed record2sample names: MySamples" in str(info.value)
    with pytest.raises(UnknownPluginError, match="installed recipe names: none"):
        plugins.resolve(PluginKind.RECIPE, "MySamples")  # kinds do not mix


def test_a_module_class_reference_resolves() -> None:
    plugins = Plugins(blocked=())
    assert plugins.resolve(PluginKind.COMPONENT, "pathlib:Path") is Path
    with pytest.raises(UnknownPluginError, match="cannot import"):
        plugins.resolve(PluginKind.COMPONENT, "no_such_module_x:Thing")
    with pytest.raises(UnknownPluginError, match="not a class"):
        plugins.resolve(PluginKind.COMPONENT, "sys:path")
    assert sys.modules["pathlib"]  # the reference imported nothing unexpected


def test_unregister_forgets_every_class_of_the_plugin() -> None:
    plugins = Plugins(blocked=())
    plugins.register(inline_plugin(recipes={"r": type("R", (), {})}), "inline")
    assert plugins.names(PluginKind.RECIPE) == ("r",)
    plugins.unregister("inline")
    assert plugins.names(PluginKind.RECIPE) == ()
