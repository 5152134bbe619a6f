"""What a deployment's scenarios name, resolved through the plugins; and loading the file.

:func:`scenario_classes` resolves the recipe, stages, component and extensions of one scenario
and checks each config against its class's settings; :func:`load_deployment` reads a
deployment file (:mod:`reef.core.deployment` structures it) and checks every scenario, so that
all problems of the file are reported at once, each with its path.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs

from reef.core.deployment import (
    Deployment,
    DeploymentError,
    ScenarioSection,
    StageSection,
    TrainingSection,
    deployment_document,
)
from reef.core.plugins import PluginConfigError, PluginSettings
from reef.evals.sets import EvalSetError, load_eval_set
from reef.plugins.manager import Plugins, settings_class_of
from reef.plugins.registrar import PluginKind, PluginLoadError, UnknownPluginError
from reef.recipe import Recipe


@attrs.frozen
class ScenarioClasses:
    """The classes a scenario names, resolved: its recipe, its stages and its components."""

    recipe: type[Any]
    record2sample: type[Any]
    sample2job: type[Any]
    #: the component class of each trainer, by trainer name (none without ``training``)
    components: Mapping[str, type[Any]]
    #: the parsed settings of each extension the scenario configures, by extension name
    extensions: Mapping[str, PluginSettings] = attrs.field(factory=dict)


class _Components(Mapping[str, type[Any]]):
    """Each trainer's component class, by trainer, imported when first looked up: reading and
    checking a deployment imports no component (its PyTorch, its SDK) until a trainer runs."""

    def __init__(self, plugins: Plugins, names: Mapping[str, str]) -> None:
        self._plugins = plugins
        self._names = dict(names)

    def __getitem__(self, trainer: str) -> type[Any]:
        return self._plugins.resolve(PluginKind.COMPONENT, self._names[trainer])

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def recipe_job_parameters(recipe: type[Any] | None, scenario: ScenarioSection) -> Mapping[str, Any]:
    """The job parameters a scenario's trainers give its component with each job: the
    recipe's, built from the deployment's recipe config (``Recipe.job_parameters_of``).

    :raises PluginConfigError: for a recipe config its settings refuse (``reef check`` and
        the deployment's reading name it first).
    """
    if recipe is None:
        return {}
    build = getattr(recipe, "job_parameters_of", None)
    if build is None:  # a recipe that is not a reef.recipe.Recipe
        return dict(getattr(recipe, "job_parameters", {}))
    settings = settings_class_of(recipe).parse(scenario.recipe.config, plugin_class=recipe)
    parameters: Mapping[str, Any] = build(settings)
    return parameters


def recipe_gaps(plugins: Plugins, recipe: type[Any]) -> tuple[str, ...]:
    """Why ``recipe`` cannot be used as it is installed: each stage its
    :meth:`~reef.recipe.Recipe.pipeline_spec` names that does not resolve (a recipe whose stages
    come with a later release of its distribution, or whose plugin is blocked); empty when it
    can be used."""
    if not issubclass(recipe, Recipe):
        return ("it does not extend reef.Recipe, so it names no stages",)
    spec = recipe.pipeline_spec()
    gaps = []
    for stage, kind in (
        ("record2sample", PluginKind.RECORD2SAMPLE),
        ("sample2job", PluginKind.SAMPLE2JOB),
    ):
        name = getattr(spec, stage)
        # A registered name is enough (its class is imported when a scenario uses it).
        try:
            if ":" in name:
                plugins.resolve(kind, name)
            else:
                plugins.registered(kind, name)
        except UnknownPluginError:
            gaps.append(f"its {kind} stage {name!r} is not installed")
    return tuple(gaps)


def _resolve(
    plugins: Plugins, kind: PluginKind, name: str, path: str, problems: list[str]
) -> type[Any] | None:
    try:
        return plugins.resolve(kind, name)
    except (UnknownPluginError, PluginLoadError) as exc:
        problems.append(f"{exc} @ {path}")
        return None


def _check_config(
    owner: type[Any] | str,
    settings: type[PluginSettings] | None,
    config: Mapping[str, Any] | None,
    path: str,
    problems: list[str],
    causes: list[PluginConfigError],
) -> PluginSettings | None:
    """``config`` parsed by ``settings`` (by default ``owner``'s own ``Settings``), or ``None``
    with its problems appended; errors name ``owner`` (a class, or its name)."""
    try:
        if settings is None:
            assert isinstance(owner, type)
            settings = settings_class_of(owner)
        return settings.parse(config, plugin_class=owner, path=path)
    except PluginConfigError as exc:
        problems.extend(f"{e.plugin}: {e.reason} @ {e.key}" for e in exc.errors)
        causes.append(exc)
    except TypeError as exc:
        problems.append(f"{exc} @ {path}")
    return None


def _check_own_state(
    trainer: str,
    settings: type[PluginSettings],
    options: Mapping[str, Any] | None,
    path: str,
    holders: dict[str, str],
    problems: list[str],
) -> None:
    """Refuse a trainer whose component keeps its state in a folder another trainer of the
    scenario already keeps its state in (the options its settings name in ``state_options``):
    the two would overwrite each other's weights and journals."""
    for option in getattr(settings, "state_options", ()):
        value = (options or {}).get(option)
        if not isinstance(value, str):
            continue  # missing or mistyped: the settings report it
        folder = os.path.normpath(value)
        other = holders.setdefault(folder, trainer)
        if other != trainer:
            problems.append(
                f"trainers {other!r} and {trainer!r} both keep their state in {value!r}: they"
                f" would overwrite each other's weights; give each its own {option}"
                f" @ {path}.options.{option}"
            )


def scenario_classes(
    name: str,
    scenario: ScenarioSection,
    plugins: Plugins,
    problems: list[str] | None = None,
    causes: list[PluginConfigError] | None = None,
) -> ScenarioClasses | None:
    """Resolve the classes of scenario ``name`` and check each config against its class's
    settings, appending every problem to ``problems`` (``None``: raise them all) and each
    plugin's refusal of its config to ``causes`` (the types the raised error is of too).

    :raises DeploymentError: when ``problems`` is ``None`` and anything is wrong.
    """
    found: list[str] = [] if problems is None else problems
    refusals: list[PluginConfigError] = [] if causes is None else causes
    before = len(found)
    path = f"$.scenarios.{name}"
    recipe = _resolve(plugins, PluginKind.RECIPE, scenario.recipe.class_, f"{path}.recipe", found)
    if recipe is not None and not issubclass(recipe, Recipe):
        found.append(
            f"recipe {scenario.recipe.class_!r} ({recipe.__module__}:{recipe.__qualname__}) does"
            " not extend reef.Recipe, so it names no stages: make the class a subclass of"
            f" reef.Recipe with a pipeline_spec() @ {path}.recipe"
        )
        recipe = None
    classes: dict[str, type[Any] | None] = {}
    recipe_settings = None
    if recipe is not None:
        recipe_settings = _check_config(
            recipe, None, scenario.recipe.config, f"{path}.recipe.config", found, refusals
        )
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
            # The recipe's default.
            class_name = getattr(recipe.pipeline_spec(), stage)
        stage_class = _resolve(plugins, kind, class_name, f"{stage_path}.class", found)
        classes[stage] = stage_class
        if stage_class is not None:
            _check_config(
                stage_class, None, section.config, f"{stage_path}.config", found, refusals
            )
    # The recipe checks the pipeline its trainers will build (a weight recipe's job_samples);
    # a scenario without a training section builds none, so it only records until one is added.
    if recipe is not None and recipe_settings is not None and scenario.trainings:
        try:
            recipe.check_pipeline(scenario.pipeline, recipe_settings, path=f"{path}.pipeline")
        except PluginConfigError as exc:
            found.extend(f"{e.plugin}: {e.reason} @ {e.key}" for e in exc.errors)
            refusals.append(exc)
    components: dict[str, str] = {}
    holders: dict[str, str] = {}  # state folder -> the trainer that keeps its state there
    entries = scenario.trainings
    for index, entry in enumerate(entries):
        # A single mapping keeps its paths; a list's entries are numbered.
        listed = not isinstance(scenario.training, TrainingSection)
        training_path = f"{path}.training" + (f"[{index}]" if listed else "")
        try:
            # The settings alone: the component itself is imported when its trainer runs.
            owner, settings = plugins.settings_of(PluginKind.COMPONENT, entry.component)
        except (UnknownPluginError, PluginLoadError, TypeError) as exc:
            found.append(f"{exc} @ {training_path}.component")
            continue
        components[entry.trainer] = entry.component
        _check_config(owner, settings, entry.options, f"{training_path}.options", found, refusals)
        _check_own_state(entry.trainer, settings, entry.options, training_path, holders, found)
    extensions: dict[str, PluginSettings] = {}
    for extension, config in scenario.extensions.items():
        extension_path = f"{path}.extensions.{extension}"
        settings_class = _resolve(plugins, PluginKind.EXTENSION, extension, extension_path, found)
        if settings_class is None:
            continue
        # An extension registers its settings class itself: it is what the scenario configures.
        parsed = _check_config(
            settings_class, settings_class, config, extension_path, found, refusals
        )
        if parsed is not None:
            extensions[extension] = parsed
    if len(found) > before:
        if problems is None:
            raise DeploymentError.of(f"scenario {name}", tuple(found), refusals)
        return None
    assert recipe is not None
    return ScenarioClasses(
        recipe=recipe,
        record2sample=_known(classes["record2sample"]),
        sample2job=_known(classes["sample2job"]),
        components=_Components(plugins, components),
        extensions=extensions,
    )


def _known(cls: type[Any] | None) -> type[Any]:
    assert cls is not None  # no problem was found, so every class resolved
    return cls


def _eval_problems(name: str, scenario: ScenarioSection, served: bool) -> list[str]:
    """What is wrong with the scenario's eval sets: a file, an item, a verifier, or an engine
    that serves no artifact to evaluate."""
    path = f"$.scenarios.{name}.evals"
    if scenario.evals and not served:
        return [
            "evals score the artifacts the scenario's engine serves, and it serves none: serve"
            f" the scenario with engine local, vllm or sglang @ {path}"
        ]
    found = []
    for eval_name, section in scenario.evals.items():
        try:
            load_eval_set(eval_name, section)
        except EvalSetError as exc:
            found.append(f"{exc} @ {path}.{eval_name}")
    return found


def deployment_trackers(
    deployment: Deployment,
    plugins: Plugins,
    problems: list[str] | None = None,
    causes: list[PluginConfigError] | None = None,
) -> dict[str, PluginSettings]:
    """The parsed settings of each tracker the deployment's ``trackers`` section names, by
    name, appending each problem to ``problems`` (``None``: raise them all). The trackers
    themselves are imported when a trainer makes them (:meth:`Plugins.resolve`).

    :raises DeploymentError: when ``problems`` is ``None`` and a tracker is unknown or refuses
        its settings.
    """
    found: list[str] = [] if problems is None else problems
    refusals: list[PluginConfigError] = [] if causes is None else causes
    before = len(found)
    parsed: dict[str, PluginSettings] = {}
    for name, config in deployment.trackers.items():
        path = f"$.trackers.{name}"
        try:
            owner, settings = plugins.settings_of(PluginKind.TRACKER, name)
        except (UnknownPluginError, PluginLoadError, TypeError) as exc:
            found.append(f"{exc} @ {path}")
            continue
        checked = _check_config(owner, settings, config, path, found, refusals)
        if checked is not None:
            parsed[name] = checked
    if problems is None and len(found) > before:
        raise DeploymentError.of("trackers", tuple(found), refusals)
    return parsed


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
        origin = str(source)
        try:
            text = source.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise DeploymentError(
                origin,
                (f"cannot read the deployment file ({reason}): give the path of a YAML file",),
            ) from exc
    else:
        origin, text = "<deployment>", source
    problems: list[str] = []
    causes: list[PluginConfigError] = []
    document = deployment_document(
        text, origin=origin, environ=os.environ if environ is None else environ, problems=problems
    )
    located: list[tuple[str, str]] = []
    deployment = Deployment.structure_at(document, "$", located)
    problems.extend(f"{reason} @ {path}" for path, reason in located)
    if deployment is not None:
        if not deployment.scenarios:
            problems.append("a deployment needs at least one scenario @ $.scenarios")
        for name, scenario in deployment.scenarios.items():
            scenario_classes(name, scenario, plugins, problems, causes)
            try:
                served = deployment.served_training(name)
            except ValueError as exc:
                problems.append(f"{exc} @ $.scenarios.{name}.training")
            else:
                problems.extend(_eval_problems(name, scenario, served is not None))
        deployment_trackers(deployment, plugins, problems, causes)
    elif isinstance(document, Mapping) and isinstance(document.get("scenarios"), Mapping):
        # Another section is wrong: still check the stages of every scenario that reads, so
        # the file's problems are all reported at once (the section's own are listed above).
        for name, raw in document["scenarios"].items():
            readable = ScenarioSection.structure_at(raw, f"$.scenarios.{name}", [])
            if readable is not None:
                scenario_classes(str(name), readable, plugins, problems, causes)
    if problems:
        raise DeploymentError.of(origin, tuple(problems), causes)
    assert deployment is not None
    return deployment
