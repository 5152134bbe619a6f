"""The contract of a task generator, and the results it gets back (P-TASK-2..6).

A deployment of the generated-task recipe (:mod:`reef.recipe.generated_tasks.recipe`) names a
:class:`TaskGenerator` in ``pipeline.record2sample.config.generator``. The recipe does not know
how its generator makes tasks, so a team swaps generators by editing that one key.

The recipe's record-to-sample stage
(:class:`~reef.recipe.generated_tasks.processor.GeneratedTaskSamples`) runs the generation
rounds: it asks the generator for tasks, saves the candidates, has the generator validate each
one, publishes the valid tasks with their train/eval split, and hands each train task to the
pipeline. Task jobs (:class:`~reef.recipe.generated_tasks.processor.GeneratedTaskJobData`) train
the tasks; the stage gives each train task one :data:`GeneratedTaskResult` from the job's end,
and once every train task of a generation has one, it sends the generation's results to the
generator's :meth:`TaskGenerator.record_results`.

Everything here is a value with a JSON form, because the stage keeps it in the scenario's task
store across restarts.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, Self, TypeAlias

import attrs
from typing_extensions import TypeVar

from reef.core.harbor import HarborTask
from reef.core.plugins import NoSettings, PluginSettings
from reef.errors import ReefError

if TYPE_CHECKING:
    from reef.record2sample.generator import TaskGenerationRequest

__all__ = [
    "FailedTask",
    "GeneratedTaskResult",
    "GeneratedTaskResultError",
    "HeldOutTask",
    "RejectedTask",
    "RolledOutTask",
    "TaskGenerator",
    "TaskValidationResult",
    "result_from_json",
    "result_to_json",
]


class GeneratedTaskResultError(ReefError, ValueError):
    """A stored result that is not one of the four :data:`GeneratedTaskResult` cases."""


# -- validation ------------------------------------------------------------------------------


def _texts(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _floats(values: Iterable[float]) -> tuple[float, ...]:
    return tuple(float(value) for value in values)


@attrs.frozen
class TaskValidationResult:
    """What :meth:`TaskGenerator.validate` found wrong with one task (P-TASK-4).

    :ivar errors: the task's defects, each a sentence; empty when the task passed.
    """

    errors: tuple[str, ...] = attrs.field(default=(), converter=_texts)

    @property
    def passed(self) -> bool:
        """True when the task has no defect."""
        return not self.errors


# -- results ---------------------------------------------------------------------------------


@attrs.frozen
class RejectedTask:
    """A candidate that was never published: it failed validation, duplicated a published
    task, or conflicted with the task store (its sources joined both splits).

    :ivar reason: why, in words.
    """

    task: HarborTask
    reason: str


@attrs.frozen
class HeldOutTask:
    """A task of the eval split: it runs no rollout, and a generator must use it neither as
    training feedback nor as experience for later generations."""

    task: HarborTask


def _rewards(_: object, __: attrs.Attribute[Any], rewards: tuple[float, ...]) -> None:
    if not rewards:
        raise ValueError("a rolled-out task has one reward per rollout that ran: at least one")
    if not all(isinstance(r, int | float) and math.isfinite(r) for r in rewards):
        raise ValueError(f"rollout rewards must be finite numbers, got {list(rewards)!r}")


@attrs.frozen
class RolledOutTask:
    """A train task whose first task job ran.

    :ivar rollout_rewards: one verifier reward for each training rollout that ran, as that
        rollout's policy scored before it trained on it; a rollout that ran without a reward
        counts 0.
    """

    task: HarborTask
    rollout_rewards: tuple[float, ...] = attrs.field(converter=_floats, validator=_rewards)


@attrs.frozen
class FailedTask:
    """A train task whose first task job ran no rollout of it.

    :ivar error: what went wrong.
    :ivar infrastructure_failure: the task could not run at all (the sandbox failed, the job
        failed, the job reported no rewards for it); not a failure of the solver.
    """

    task: HarborTask
    error: str
    infrastructure_failure: bool


#: The outcome of one candidate of a generation, as :meth:`TaskGenerator.record_results` gets it.
GeneratedTaskResult: TypeAlias = RejectedTask | HeldOutTask | RolledOutTask | FailedTask

_Case: TypeAlias = Literal["rejected", "held_out", "rolled_out", "failed"]


def result_to_json(result: GeneratedTaskResult) -> dict[str, Any]:
    """The JSON form the task store keeps of ``result``."""
    body: dict[str, Any] = {"task": result.task.to_json()}
    if isinstance(result, RejectedTask):
        return {"case": "rejected", **body, "reason": result.reason}
    if isinstance(result, HeldOutTask):
        return {"case": "held_out", **body}
    if isinstance(result, RolledOutTask):
        return {"case": "rolled_out", **body, "rollout_rewards": list(result.rollout_rewards)}
    return {
        "case": "failed",
        **body,
        "error": result.error,
        "infrastructure_failure": result.infrastructure_failure,
    }


def result_from_json(value: Any) -> GeneratedTaskResult:
    """Read a result back from :func:`result_to_json`'s form.

    :raises GeneratedTaskResultError: naming what is wrong.
    """
    if not isinstance(value, Mapping):
        raise GeneratedTaskResultError(f"a result must be a JSON object, got {value!r}")
    case: _Case | Any = value.get("case")
    try:
        task = HarborTask.from_json(value.get("task"))
        if case == "rejected":
            return RejectedTask(task, str(value["reason"]))
        if case == "held_out":
            return HeldOutTask(task)
        if case == "rolled_out":
            return RolledOutTask(task, value["rollout_rewards"])
        if case == "failed":
            return FailedTask(task, str(value["error"]), bool(value["infrastructure_failure"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise GeneratedTaskResultError(f"a stored {case} result is malformed: {exc}") from exc
    raise GeneratedTaskResultError(
        f"unknown result case {case!r}; expected rejected, held_out, rolled_out or failed"
    )


# -- the generator ---------------------------------------------------------------------------


#: A generator's settings class, what its :meth:`TaskGenerator.from_settings` receives typed
#: (``class MyGenerator(TaskGenerator[MySettings])``).
GeneratorSettingsT = TypeVar("GeneratorSettingsT", bound=PluginSettings, default=PluginSettings)


class TaskGenerator(abc.ABC, Generic[GeneratorSettingsT]):
    """Makes tasks for the generated-task recipe (P-TASK-2..5); one instance per scenario.

    A generator learns what it needs from its config and from the calls below only: Reef
    shares no file system and no state with it. Every method is a coroutine that runs on the
    record-to-sample stage's worker, never on the trainer's thread.

    :cvar Settings: the generator's keys (``pipeline.record2sample.config.generator_config``);
        a generator without any keeps :class:`~reef.core.plugins.NoSettings`.
    """

    Settings: ClassVar[type[PluginSettings]] = NoSettings

    @classmethod
    def from_config(
        cls, config: Mapping[str, Any] | None, *, scenario: str, environ: Mapping[str, str]
    ) -> Self:
        """Build the scenario's generator from its config (P-TASK-2); Reef calls it once for
        each scenario.

        Parses ``config`` with :attr:`Settings` and builds the generator with
        :meth:`from_settings`.

        :raises reef.core.plugins.PluginConfigError: naming every problem of ``config``.
        """
        settings: Any = cls.Settings.parse(config, plugin_class=cls)  # an instance of Settings
        return cls.from_settings(settings, scenario=scenario, environ=environ)

    @classmethod
    def from_settings(
        cls, settings: GeneratorSettingsT, *, scenario: str, environ: Mapping[str, str]
    ) -> Self:
        """Extension point: build the generator from its parsed settings.

        The default calls ``cls(**settings.as_keywords())``. Override it when the generator
        needs the scenario's name or reads ``environ`` (an API key).
        """
        del scenario, environ
        return cls(**settings.as_keywords())

    @abc.abstractmethod
    async def generate(self, request: TaskGenerationRequest) -> tuple[HarborTask, ...]:
        """Make zero or more tasks for ``request`` (P-TASK-3).

        Keep ``request.source_record_ids`` in each task's ``source_agent_record_ids``. Raise
        when the generator cannot run: the stage retries the generation.
        """

    @abc.abstractmethod
    async def validate(self, task: HarborTask) -> TaskValidationResult:
        """Check one task (P-TASK-4): return its defects as errors (none: it passed).

        Raise only when the checks cannot run: the stage retries the generation from its
        saved candidates. The task is a value: stage it wherever the checks run.
        """

    async def record_results(
        self, results: tuple[GeneratedTaskResult, ...], *, generation: int
    ) -> None:
        """Receive the results of the generate call numbered ``generation`` (P-TASK-5).

        Called once every train task of that generation has a result: perhaps after later
        generations started, perhaps in a later process. Keep what an open generation needs
        across a restart, and ignore a second call for a generation already closed. Raising
        makes the stage try again after the next job. The default keeps nothing.
        """
        del results, generation
