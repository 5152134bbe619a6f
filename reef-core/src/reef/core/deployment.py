"""The deployment file: scenarios, their recipes and stages, storage, serving and auth.

The file is YAML, read with ``yaml.safe_load`` only (no tag builds a Python object). A string
may hold ``${NAME}`` references, replaced from the environment given to :func:`load_deployment`
(secrets stay out of the file). Every section is a settings class, so the file is checked key by
key like a stage's config: unknown keys (with the closest valid one), wrong types, bad values.
Loading also resolves every class a scenario names and parses each stage's config with that
stage's settings class. All problems of the file are reported at once, each with its path.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import attrs
import yaml

from reef.core.config import config_option
from reef.core.plugins import (
    NoSettings,
    PluginConfigError,
    PluginKind,
    Plugins,
    PluginSettings,
    UnknownPluginError,
)

_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")

#: The storage a deployment uses when it names none: a SQLite file beside the process.
DEFAULT_STORAGE_URL = "sqlite:///reef.db"


class DeploymentError(ValueError):
    """A deployment file cannot be used. ``problems`` holds every problem of the file, each as
    ``<reason> @ <path>`` (a stage's problem starts with the stage's class name)."""

    def __init__(self, source: str, problems: tuple[str, ...]) -> None:
        self.source = source
        self.problems = problems
        listed = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s)\n{listed}")


# --------------------------------------------------------------------------------------------
# the sections
# --------------------------------------------------------------------------------------------


@attrs.frozen
class StorageSection(PluginSettings):
    """Where a deployment (or one scenario) keeps its records, samples and tasks."""

    url: str = config_option(
        help="SQLAlchemy URL: sqlite:///path.db (default) or postgresql+psycopg://..."
    )


@attrs.frozen
class ServingSection(PluginSettings):
    """The inference engine that answers the agents' calls (OpenAI-compatible)."""

    engine: str = config_option(help="the engine's OpenAI-compatible base URL")
    model: str | None = config_option(default=None, help="the model name the engine serves")
    api_key: str | None = config_option(
        default=None, help="the engine's API key; write it as a ${ENV} reference"
    )


@attrs.frozen
class TokenSection(PluginSettings):
    """One bearer token of the service and what it may do."""

    token: str = config_option(help="the secret; write it as a ${ENV} reference")
    scopes: tuple[Literal["infer", "feedback", "admin"], ...] = config_option(
        help="infer (inference), feedback (reports, uploads), admin (modes, instructions)",
        validator=attrs.validators.min_len(1),
    )
    scenarios: tuple[str, ...] | None = config_option(
        default=None, help="the scenarios the token is limited to; all when absent"
    )


@attrs.frozen
class AuthSection(PluginSettings):
    """The tokens the service accepts, by name."""

    tokens: Mapping[str, TokenSection] = config_option(
        factory=dict, help="tokens by name (the name shows in logs, never the secret)"
    )


@attrs.frozen
class StageSection(PluginSettings):
    """One stage of a scenario's pipeline: the class (else the recipe's default) and its
    config, which the stage's own settings class checks."""

    class_: str | None = config_option(
        default=None, key="class", help="a registered stage name or module:Class"
    )
    config: Mapping[str, Any] | None = config_option(default=None, help="the stage's own settings")


@attrs.frozen
class PipelineSection(PluginSettings):
    """The two stages of a scenario's pipeline."""

    record2sample: StageSection = config_option(
        factory=StageSection, help="the record-to-sample stage"
    )
    sample2job: StageSection = config_option(factory=StageSection, help="the sample-to-job stage")


@attrs.frozen
class RecipeSection(PluginSettings):
    """The recipe of a scenario and its own config (``recipe: sft`` is short for
    ``recipe: {class: sft}``)."""

    class_: str = config_option(key="class", help="a registered recipe name or module:Class")
    config: Mapping[str, Any] | None = config_option(default=None, help="the recipe's own settings")


@attrs.frozen
class TrainingSection(PluginSettings):
    """The training component that trains a scenario's jobs."""

    component: str = config_option(help="a registered component name or module:Class")
    options: Mapping[str, Any] | None = config_option(
        default=None, help="the component's own settings"
    )


@attrs.frozen
class ScenarioSection(PluginSettings):
    """One scenario: what it records, how its records become jobs, and who trains them."""

    recipe: RecipeSection = config_option(help="the recipe: its name, or {class, config}")
    pipeline: PipelineSection = config_option(
        factory=PipelineSection, help="each stage's class (optional) and config"
    )
    training: TrainingSection | None = config_option(
        default=None, help="the training component and its options"
    )
    storage: StorageSection | None = config_option(
        default=None, help="this scenario's storage, instead of the deployment's"
    )
    serving: ServingSection | None = config_option(
        default=None, help="this scenario's engine, instead of the deployment's"
    )
    extensions: Mapping[str, Mapping[str, Any] | None] = config_option(
        factory=dict, help="each extension's config for this scenario, by extension name"
    )


@attrs.frozen
class Deployment(PluginSettings):
    """A whole deployment file."""

    scenarios: Mapping[str, ScenarioSection] = config_option(help="the scenarios, by name")
    storage: StorageSection = config_option(
        factory=lambda: StorageSection(url=DEFAULT_STORAGE_URL),
        help=f"where records and samples are kept; {DEFAULT_STORAGE_URL} when absent",
    )
    serving: ServingSection | None = config_option(
        default=None, help="the inference engine of every scenario that names none"
    )
    auth: AuthSection = config_option(factory=AuthSection, help="the service's tokens")

    def storage_of(self, scenario: str) -> StorageSection:
        """The storage of ``scenario``: its own, else the deployment's."""
        return self.scenarios[scenario].storage or self.storage

    def serving_of(self, scenario: str) -> ServingSection | None:
        """The engine of ``scenario``: its own, else the deployment's."""
        return self.scenarios[scenario].serving or self.serving


@attrs.frozen
class ScenarioClasses:
    """The classes a scenario names, resolved: its recipe, its stages and its component."""

    recipe: type[Any]
    record2sample: type[Any]
    sample2job: type[Any]
    component: type[Any] | None
    #: the parsed settings of each extension the scenario configures, by extension name
    extensions: Mapping[str, PluginSettings] = attrs.field(factory=dict)


# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------


def _substitute(value: Any, environ: Mapping[str, str], path: str, problems: list[str]) -> Any:
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in environ:
                problems.append(f"environment variable {name} is not set @ {path}")
                return match.group(0)
            return environ[name]

        return _ENV_REFERENCE.sub(replace, value)
    if isinstance(value, Mapping):
        return {k: _substitute(v, environ, f"{path}.{k}", problems) for k, v in value.items()}
    if isinstance(value, list):
        return [_substitute(v, environ, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    return value


def _expand_recipe_shorthand(document: Any) -> Any:
    """``recipe: sft`` reads as ``recipe: {class: sft}``."""
    if not isinstance(document, Mapping) or not isinstance(document.get("scenarios"), Mapping):
        return document
    scenarios = {
        name: (
            {**scenario, "recipe": {"class": scenario["recipe"]}}
            if isinstance(scenario, Mapping) and isinstance(scenario.get("recipe"), str)
            else scenario
        )
        for name, scenario in document["scenarios"].items()
    }
    return {**document, "scenarios": scenarios}


def settings_class_of(plugin_class: type[Any]) -> type[PluginSettings]:
    """The settings class a plugin class declares as ``Settings``; a class that declares none
    takes no config (:class:`NoSettings`)."""
    settings = getattr(plugin_class, "Settings", NoSettings)
    if not (isinstance(settings, type) and issubclass(settings, PluginSettings)):
        raise TypeError(f"{plugin_class.__name__}.Settings must extend PluginSettings")
    return settings


def _resolve(
    plugins: Plugins, kind: PluginKind, name: str, path: str, problems: list[str]
) -> type[Any] | None:
    try:
        return plugins.resolve(kind, name)
    except UnknownPluginError as exc:
        problems.append(f"{exc} @ {path}")
        return None


def _check_config(
    plugin_class: type[Any],
    config: Mapping[str, Any] | None,
    path: str,
    problems: list[str],
    *,
    settings_class: type[PluginSettings] | None = None,
) -> PluginSettings | None:
    try:
        settings = settings_class or settings_class_of(plugin_class)
        return settings.parse(config, plugin_class=plugin_class, path=path)
    except PluginConfigError as exc:
        problems.extend(f"{e.plugin}: {e.reason} @ {e.key}" for e in exc.errors)
    except TypeError as exc:
        problems.append(f"{exc} @ {path}")
    return None


def scenario_classes(
    name: str, scenario: ScenarioSection, plugins: Plugins, problems: list[str] | None = None
) -> ScenarioClasses | None:
    """Resolve the classes of scenario ``name`` and check each config against its class's
    settings, appending every problem to ``problems`` (``None``: raise them all).

    :raises DeploymentError: when ``problems`` is ``None`` and anything is wrong.
    """
    found: list[str] = [] if problems is None else problems
    before = len(found)
    path = f"$.scenarios.{name}"
    recipe = _resolve(plugins, PluginKind.RECIPE, scenario.recipe.class_, f"{path}.recipe", found)
    classes: dict[str, type[Any] | None] = {}
    if recipe is not None:
        _check_config(recipe, scenario.recipe.config, f"{path}.recipe.config", found)
    for stage, kind in (
        ("record2sample", PluginKind.RECORD2SAMPLE),
        ("sample2job", PluginKind.SAMPLE2JOB),
    ):
        section: StageSection = getattr(scenario.pipeline, stage)
        stage_path = f"{path}.pipeline.{stage}"
        class_name = section.class_
        if class_name is None:
            if recipe is None:
                classes[stage] = None
                continue
            # The recipe's default; a recipe that is not a reef.recipe.Recipe has none.
            class_name = getattr(recipe.pipeline_spec(), stage)
        stage_class = _resolve(plugins, kind, class_name, f"{stage_path}.class", found)
        classes[stage] = stage_class
        if stage_class is not None:
            _check_config(stage_class, section.config, f"{stage_path}.config", found)
    if recipe is not None:
        try:
            recipe.check_pipeline(
                scenario.pipeline.sample2job.config, path=f"{path}.pipeline.sample2job.config"
            )
        except PluginConfigError as exc:
            found.extend(f"{e.plugin}: {e.reason} @ {e.key}" for e in exc.errors)
    component: type[Any] | None = None
    if scenario.training is not None:
        training_path = f"{path}.training"
        component = _resolve(
            plugins,
            PluginKind.COMPONENT,
            scenario.training.component,
            f"{training_path}.component",
            found,
        )
        if component is not None:
            _check_config(component, scenario.training.options, f"{training_path}.options", found)
    extensions: dict[str, PluginSettings] = {}
    for extension, config in scenario.extensions.items():
        extension_path = f"{path}.extensions.{extension}"
        settings_class = _resolve(plugins, PluginKind.EXTENSION, extension, extension_path, found)
        if settings_class is None:
            continue
        # An extension registers its settings class itself: it is what the scenario configures.
        parsed = _check_config(
            settings_class, config, extension_path, found, settings_class=settings_class
        )
        if parsed is not None:
            extensions[extension] = parsed
    if len(found) > before:
        if problems is None:
            raise DeploymentError(f"scenario {name}", tuple(found))
        return None
    assert recipe is not None
    return ScenarioClasses(
        recipe=recipe,
        record2sample=_known(classes["record2sample"]),
        sample2job=_known(classes["sample2job"]),
        component=component,
        extensions=extensions,
    )


def _known(cls: type[Any] | None) -> type[Any]:
    assert cls is not None  # no problem was found, so every class resolved
    return cls


def load_deployment(
    source: str | Path,
    *,
    plugins: Plugins,
    environ: Mapping[str, str] | None = None,
) -> Deployment:
    """Read, substitute, structure and check a deployment file.

    :param source: a path to the YAML file, or its text.
    :param plugins: the loaded plugins, which resolve every class name.
    :param environ: where ``${NAME}`` references are read; by default the process environment.
    :raises DeploymentError: listing every problem of the file, each with its path.
    """
    if isinstance(source, Path):
        origin, text = str(source), source.read_text(encoding="utf-8")
    else:
        origin, text = "<deployment>", source
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise DeploymentError(origin, (f"not valid YAML: {exc}",)) from exc
    problems: list[str] = []
    document = _substitute(document, os.environ if environ is None else environ, "$", problems)
    document = _expand_recipe_shorthand(document)
    located: list[tuple[str, str]] = []
    deployment = Deployment.structure_at(document, "$", located)
    problems.extend(f"{reason} @ {path}" for path, reason in located)
    if deployment is not None:
        if not deployment.scenarios:
            problems.append("a deployment needs at least one scenario @ $.scenarios")
        for name, scenario in deployment.scenarios.items():
            scenario_classes(name, scenario, plugins, problems)
    elif isinstance(document, Mapping) and isinstance(document.get("scenarios"), Mapping):
        # Another section is wrong: still check the stages of every scenario that reads, so
        # the file's problems are all reported at once (the section's own are listed above).
        for name, raw in document["scenarios"].items():
            readable = ScenarioSection.structure_at(raw, f"$.scenarios.{name}", [])
            if readable is not None:
                scenario_classes(str(name), readable, plugins, problems)
    if problems:
        raise DeploymentError(origin, tuple(problems))
    assert deployment is not None
    return deployment
