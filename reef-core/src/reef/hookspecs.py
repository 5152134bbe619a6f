"""The hooks a Reef plugin implements: read this first when you write one.

A plugin is a module (or any object) with functions marked ``@reef.hookimpl`` whose names are
the hook names below. A distribution makes its plugin known through one entry point in the
group ``reef.plugins``, under a short, user-facing name (``sft``, ``distill``, ``ecc``)::

    [project.entry-points."reef.plugins"]
    sft = "reef_sft.plugin"

An entry point may also name a class (``ecc = "agent_ecc.reef_plugin:EccPlugin"``): Reef makes
one instance per :class:`reef.embed.Plugins`, whose methods are the hooks and which keeps the
plugin's state, so two ``Plugins`` of one process never share it. ``docs/plugins.md`` lists
each hook's exact signature, and a test keeps that list true.

Two families of hooks:

- **Discovery hooks** run once per plugin, when :meth:`reef.embed.Plugins.load`
  registers it. Each receives a :class:`reef.PluginRegistrar` bound to one kind of
  contribution; the plugin calls ``registry.register("short-name", TheClass)`` for each class
  it contributes. A deployment then names the class by that short name.
- **Event hooks** run at fixed points of a training job's life, for every scenario and
  trainer. They are called by the trainer on its own thread and must not block on the network
  for long: the trainer holds its lock.
- **The status hook** (:func:`reef_scenario_status`) asks each plugin what it shows of a
  scenario; the trainer calls it for its status snapshot and ``GET /reef/status`` shows it.

An implementation may take any subset of a hook's parameters, by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from reef.core.job_data import JobData, JobOutcome
    from reef.core.plugins import PluginSettings
    from reef.plugins.registrar import PluginRegistrar

#: The pluggy project name: every Reef hook and implementation marker carries it.
PROJECT_NAME = "reef"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
#: What a plugin imports (as ``reef.hookimpl``) to mark its hook implementations.
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


# --------------------------------------------------------------------------------------------
# discovery: what a distribution contributes, each under a short name
# --------------------------------------------------------------------------------------------


@hookspec
def reef_register_recipes(registry: PluginRegistrar) -> None:
    """Register recipes: classes extending :class:`reef.Recipe`.

    Called once for this plugin when it is loaded. A deployment's ``scenarios.<name>.recipe``
    names a recipe by the short name given here.

    :param registry: ``registry.register(name, cls)`` adds one recipe under ``name``. A name
        another distribution already registered for recipes is an error naming both.
    """


@hookspec
def reef_register_record2sample(registry: PluginRegistrar) -> None:
    """Register record-to-sample stages: classes extending :class:`reef.Record2Sample`.

    Called once for this plugin when it is loaded. A deployment's
    ``pipeline.record2sample.class`` names a stage by the short name given here.

    :param registry: ``registry.register(name, cls)`` adds one stage under ``name``.
    """


@hookspec
def reef_register_sample2job(registry: PluginRegistrar) -> None:
    """Register sample-to-job stages: classes extending :class:`reef.Sample2Job`.

    Called once for this plugin when it is loaded. A deployment's
    ``pipeline.sample2job.class`` names a stage by the short name given here.

    :param registry: ``registry.register(name, cls)`` adds one stage under ``name``.
    """


@hookspec
def reef_register_task_generators(registry: PluginRegistrar) -> None:
    """Register task generators: classes implementing ``reef.recipe.generated_tasks.TaskGenerator``.

    Called once for this plugin when it is loaded. The generated-task recipe's
    ``pipeline.record2sample.config.generator`` names a generator by the short name given here.

    :param registry: ``registry.register(name, cls)`` adds one generator under ``name``.
    """


@hookspec
def reef_register_components(registry: PluginRegistrar) -> None:
    """Register training components: the classes that train a job's data.

    Called once for this plugin when it is loaded. A deployment's
    ``scenarios.<name>.training.component`` names a component by the short name given here.

    :param registry: ``registry.register(name, cls)`` adds one component under ``name``.
    """


@hookspec
def reef_register_extensions(registry: PluginRegistrar) -> None:
    """Register extensions: plugins that act at the event hooks below and take configuration
    per scenario.

    Called once for this plugin when it is loaded. The class registered is the extension's
    settings class (extending :class:`reef.PluginSettings`); a deployment's
    ``scenarios.<name>.extensions.<extension>`` mapping is parsed with it when the deployment
    is read, and the parsed settings reach :func:`reef_scenario_started`.

    :param registry: ``registry.register(name, settings_class)`` adds one extension.
    """


@hookspec
def reef_register_trackers(registry: PluginRegistrar) -> None:
    """Register experiment trackers: classes extending :class:`reef.Tracker`.

    Called once for this plugin when it is loaded. A deployment's ``trackers.<name>`` names a
    tracker by the short name given here (its mapping is the tracker's settings); each trainer
    then keeps one run in every tracker the deployment configures.

    :param registry: ``registry.register(name, cls)`` adds one tracker under ``name``.
    """


# --------------------------------------------------------------------------------------------
# events: a scenario starts, then the points a job's data passes, in order
# --------------------------------------------------------------------------------------------


@hookspec
def reef_scenario_started(scenario: str, extensions: Mapping[str, PluginSettings]) -> None:
    """A scenario's trainers are about to start in this process.

    Called once per scenario and process, before any job of the scenario is built, so that an
    extension can set up what its event hooks need for it (Agent ECC opens the scenario's seal
    journal here). A scenario whose deployment configures no extension still gets the call,
    with an empty mapping.

    :param scenario: the scenario's name in the deployment.
    :param extensions: the parsed settings of each extension the scenario configures, by the
        extension's registered name.
    """


@hookspec
def reef_job_data_built(scenario: str, trainer: str, job_data: JobData) -> None:
    """The pipeline built a job's data and the trainer validated it against the output schema.

    Called before the job is submitted and before :func:`reef_before_submit`. The data is
    reserved: it trains only if the submission's commit follows.

    :param scenario: the scenario's name in the deployment.
    :param trainer: the trainer's name (its training component's name).
    :param job_data: the job's data, as the sample-to-job stage made it.
    """


@hookspec(firstresult=True)
def reef_before_submit(scenario: str, trainer: str, job_data: JobData) -> JobData | None:
    """The trainer is about to submit a job's data to its training component.

    This is where a plugin that must change what trains does so (Agent ECC seals the rewards of
    the job's data here). An exception refuses the submission: the data is released to the
    buffer and nothing is submitted.

    :param scenario: the scenario's name in the deployment.
    :param trainer: the trainer's name (its training component's name).
    :param job_data: the job's data that will be submitted.
    :return: replacement job data to submit instead, or ``None`` to submit ``job_data`` as it
        is. Stops at the first non-``None`` result.
    """


@hookspec
def reef_job_provenance(scenario: str, trainer: str, job_data: JobData) -> Mapping[str, Any] | None:
    """Where the rewards of a job's data came from, as the plugin decided them, for the job
    history people read (the console's sample view).

    Called after :func:`reef_before_submit`, with the data that will be submitted, before it
    is. It must be cheap (the trainer holds its lock): report what the plugin decided, not the
    network. An exception here is recorded in the trainer's ``last_errors``; the job still
    trains, without the plugin's entry.

    :param scenario: the scenario's name in the deployment.
    :param trainer: the trainer's name (its training component's name).
    :param job_data: the job's data that will be submitted.
    :return: ``{<extension name>: {"job": {...}, "samples": {<sample id>: {...}}}}``, JSON
        only, either key optional; the samples may include ones the plugin took out of the
        data (Agent ECC: the epoch of the seal, and each sample's verdict and trained reward,
        excluded groups included). ``None`` for a job the plugin did not act on.
    """


@hookspec
def reef_job_ended(scenario: str, trainer: str, outcome: JobOutcome) -> None:
    """A training job ended (finished or failed), and the commit of its end is durable.

    Called after the record-to-sample stage's ``job_ended``; a trainer that restarts with no
    running job calls it again for the last job that ended, so an implementation must accept
    the same outcome twice.

    :param scenario: the scenario's name in the deployment.
    :param trainer: the trainer's name (its training component's name).
    :param outcome: the job's id, component, event (``finished`` or ``failed``), metrics and,
        exactly when it failed, its error.
    """


# --------------------------------------------------------------------------------------------
# status: what an extension shows of a scenario
# --------------------------------------------------------------------------------------------


@hookspec
def reef_scenario_status(scenario: str) -> Mapping[str, Any] | None:
    """What the plugin reports of a scenario's state, for ``GET /reef/status``.

    Called by each trainer of the scenario whenever it writes its status snapshot (after each
    step), so it must be cheap: read what the plugin holds, not the network. The results of
    every plugin are merged into the snapshot's ``extensions``, which the status route shows
    under the trainer; two plugins reporting under the same name is an error the trainer
    records in its ``last_errors``, as is an exception here (training goes on).

    :param scenario: the scenario's name in the deployment.
    :return: ``{<extension name>: {...}}``, JSON only (Agent ECC:
        ``{"ecc": {"epoch": ..., "last_seal": ...}}``); ``None`` for a scenario the plugin
        does not act on.
    """
