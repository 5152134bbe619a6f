"""Building a scenario's two stages, and its trainers' pipelines, from the deployment, the one
way every caller does it.

The HTTP service builds the stages to run admission the way the pipeline will read
(``uploaded_sample`` of each trainer that accepts uploads, the training modes a stage
supports); the runtime builds each trainer's :class:`~reef.train.pipeline.TrainingPipeline`
with :func:`build_pipeline`, which builds its stages the same way. Both go through
:func:`build_stages`, so a stage is configured once and admission can never disagree with the
trainer about which class or config a scenario uses. A recipe's tests call
:func:`build_pipeline` too, to run a deployment's scenario as its trainer would, and
``reef check`` calls :func:`check_stages`, so it refuses every config that ``reef serve`` would.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from reef.core.deployment import Deployment, DeploymentError, ScenarioSection
from reef.core.plugins import PluginConfigError
from reef.pipeline_context import PipelineContext
from reef.plugins import PluginKind, Plugins
from reef.plugins.scenarios import scenario_classes
from reef.record2sample.stage import Record2Sample
from reef.sample2job.stage import Sample2Job

if TYPE_CHECKING:
    from reef.storage import Database
    from reef.train.pipeline import TrainingPipeline

__all__ = ["build_pipeline", "build_stages", "check_stages", "close_stages", "scenario_trainers"]


def scenario_trainers(scenario: ScenarioSection) -> tuple[str, ...]:
    """The trainers of a scenario, by name, in the file's order: one per training component,
    named by its entry's ``name``, else by the component as the deployment names it
    (``training.component``); none without a ``training`` section (the scenario records and
    admits, but nothing trains)."""
    return tuple(entry.trainer for entry in scenario.trainings)


def build_stages(
    name: str,
    scenario: ScenarioSection,
    *,
    plugins: Plugins,
    context: PipelineContext,
    environ: Mapping[str, str] | None = None,
) -> tuple[Record2Sample, Sample2Job]:
    """The record-to-sample and sample-to-job stages of scenario ``name``, built with
    ``from_config`` in pipeline order (the sample-to-job stage receives the other, P-STG-8).

    :raises reef.core.deployment.DeploymentError: when a class cannot be resolved, a config
        does not parse or a stage refuses its config at build time (a ``buffer_size`` below
        ``job_samples``), each problem at its path in the deployment file.
    """
    classes = scenario_classes(name, scenario, plugins)
    assert classes is not None  # scenario_classes raises instead of returning None here
    env = os.environ if environ is None else environ
    if context.resolve_plugin is None:

        def resolve(kind: str, class_name: str) -> type[Any]:
            return plugins.resolve(PluginKind(kind), class_name)

        # A stage resolves the classes its config names (a task generator) as the deployment's
        # own classes resolve: registered names first, or module:Class.
        context = attrs.evolve(context, resolve_plugin=resolve)
    path = f"$.scenarios.{name}.pipeline"
    with _refusals_at(name, f"{path}.record2sample.config"):
        record2sample: Record2Sample = classes.record2sample.from_config(
            scenario.pipeline.record2sample.config, context=context, environ=env
        )
    try:
        with _refusals_at(name, f"{path}.sample2job.config"):
            sample2job: Sample2Job = classes.sample2job.from_config(
                scenario.pipeline.sample2job.config,
                context=context,
                record2sample=record2sample,
                environ=env,
            )
    except BaseException:
        record2sample.close()
        raise
    return record2sample, sample2job


@contextlib.contextmanager
def _refusals_at(scenario: str, path: str) -> Iterator[None]:
    """Re-raise a stage's refusal of its config (keys relative to it, ``$.buffer_size``) as a
    :class:`DeploymentError` whose problems carry their path in the file, and which is of the
    refusal's own type too (a ``RecipeConfigError`` stays one, P-SIZE-2, P-SIZE-4)."""
    try:
        yield
    except PluginConfigError as exc:
        problems = tuple(
            f"{e.plugin}: {e.reason} @ {path}{e.key[1:] if e.key.startswith('$') else e.key}"
            for e in exc.errors
        )
        raise DeploymentError.of(f"scenario {scenario!r}", problems, (exc,)) from exc


def check_stages(
    deployment: Deployment,
    *,
    plugins: Plugins,
    origin: str = "<deployment>",
    environ: Mapping[str, str] | None = None,
) -> None:
    """Build the stages of every trainer of every scenario, as ``reef serve`` does before it
    listens, and close them: what ``reef check`` adds to reading the file. A scenario without a
    ``training`` section has no trainer, so its stages are not built (nor are they by serve).

    :param origin: the deployment file, named by the error.
    :raises reef.core.deployment.DeploymentError: listing every stage's refusal, at its path.
    """
    problems: list[str] = []
    causes: list[PluginConfigError] = []
    for name, section in deployment.scenarios.items():
        trainers = scenario_trainers(section)
        for trainer in trainers:
            context = PipelineContext(scenario=name, component=trainer, trainers=trainers)
            try:
                record2sample, sample2job = build_stages(
                    name, section, plugins=plugins, context=context, environ=environ
                )
            except DeploymentError as exc:
                problems.extend(exc.problems)
                causes.extend(exc.causes)
                continue
            close_stages((sample2job, record2sample))
    if problems:
        raise DeploymentError.of(origin, tuple(problems), causes)


def close_stages(
    stages: Iterable[Record2Sample | Sample2Job], timeout: float | None = None
) -> None:
    """Close every stage, in order, each with ``timeout``, even when one raises; then raise
    the first error, with the later ones noted on it (the first is the one to act on, and a
    later one must not hide it)."""
    errors: list[BaseException] = []
    for stage in stages:
        try:
            stage.close(timeout)
        except BaseException as exc:
            errors.append(exc)
    if errors:
        first, *later = errors
        for error in later:
            first.add_note(f"closing another stage also failed: {type(error).__name__}: {error}")
        raise first


def build_pipeline(
    name: str,
    scenario: ScenarioSection,
    trainer: str | None = None,
    *,
    plugins: Plugins,
    database: Database,
    has_runtime_loader: bool = False,
    environ: Mapping[str, str] | None = None,
    replay_last_outcome: bool = True,
) -> TrainingPipeline:
    """The pipeline of ``trainer`` in scenario ``name``, as the runtime builds it when the
    trainer takes its lease: its context (the scenario's trainers, the training mode stored for
    the scenario, ``auto`` when none was selected), its stages (:func:`build_stages`) and its
    sample store on ``database``.

    :param trainer: the trainer's name; ``None`` for the scenario's only trainer.
    :param database: the scenario's database (the runtime passes its fenced one).
    :param has_runtime_loader: the scenario is served by an engine that loads the trained
        weights, so samples can go stale (P-STALE-10); the runtime sets it for a scenario its
        local engine serves.
    :param replay_last_outcome: hand the trainer's last job outcome to the fresh stage now
        (P-PIPE-13); the trainer passes ``False`` and replays it once it knows no job runs.
    :raises reef.core.deployment.DeploymentError: when the scenario has no such trainer, a class
        cannot be resolved, a config does not parse or a stage refuses its config.
    :raises ValueError: when the stored training mode names none.
    """
    # Imported here: checking a deployment (check_stages) builds stages without storage.
    from reef.storage import ScenarioSettings, TaskStorage, TrainerSamples
    from reef.storage.scenario_settings import TRAINING_MODE_SETTING, stored_training_mode
    from reef.train.pipeline import TrainingPipeline

    trainers = scenario_trainers(scenario)
    chosen = trainers[0] if trainer is None and len(trainers) == 1 else trainer
    if chosen is None or chosen not in trainers:
        missing = (
            "name the trainer: the scenario has not exactly one"
            if trainer is None
            else f"the scenario has no trainer {trainer!r}"
        )
        raise DeploymentError(
            f"scenario {name!r}",
            (f"{missing}; its trainers: {list(trainers)} @ $.scenarios.{name}.training",),
        )
    context = PipelineContext(
        scenario=name,
        component=chosen,
        trainers=trainers,
        training_mode=stored_training_mode(
            ScenarioSettings(database, name).get(TRAINING_MODE_SETTING)
        ),
        has_runtime_loader=has_runtime_loader,
        task_storage=TaskStorage(database, name),
    )
    record2sample, sample2job = build_stages(
        name, scenario, plugins=plugins, context=context, environ=environ
    )
    return TrainingPipeline(
        record2sample,
        sample2job,
        samples=TrainerSamples(database, name),
        context=context,
        replay_last_outcome=replay_last_outcome,
    )
