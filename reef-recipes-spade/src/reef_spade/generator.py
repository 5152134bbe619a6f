"""SPADE, a :class:`~reef.TaskGenerator` (``docs/recipes/spade.md``).

Each generation asks the designer model for tasks (:mod:`reef_spade.designer`), telling it what
the policy did with the tasks of closed generations. Each task is then validated through the
generator service (:class:`~reef.GeneratorClient`):

1. its oracle solution must pass its verifier (reward at least ``pass_reward``);
2. ``plays`` plays of the policy without the hint: a task the policy solved every time is too
   easy, and is refused;
3. ``plays`` plays with the task's hint: a task the policy solved neither without nor with the
   hint is beyond its frontier, and is refused.

What is left sits at the frontier: the policy solves it sometimes, or only with help. Plays
are no records and never train. A failure to run (the designer, the service) raises, and the
generated-task recipe tries the generation again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from reef import (
    AnswerAgent,
    GeneratedTaskResult,
    GeneratorClient,
    HarborTask,
    PluginSettings,
    Record,
    RolledOutTask,
    TaskGenerationRequest,
    TaskGenerator,
    TaskValidationResult,
    config_option,
)
from reef_spade.designer import Designer, design_prompt, hint_of, tasks_from_reply

__all__ = ["DesignerSettings", "SpadeGenerator", "SpadeSettings"]


def _positive(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value <= 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


@attrs.frozen
class DesignerSettings(PluginSettings):
    """The designer model: an OpenAI-compatible engine."""

    url: str = config_option(help="the engine's OpenAI-compatible base URL (ending in /v1)")
    model: str | None = config_option(None, help="the model name the engine serves")
    api_key: str | None = config_option(None, help="the engine's key; write it as ${ENV}")
    temperature: float = config_option(0.7, help="the designer's sampling temperature")
    max_tokens: int = config_option(4096, help="the longest designer reply", validator=_positive)


@attrs.frozen
class SpadeSettings(PluginSettings):
    """SPADE's keys (``pipeline.record2sample.config.generator_config``)."""

    designer: DesignerSettings = config_option(help="the model that writes the tasks")
    tasks_per_generation: int = config_option(
        4, help="how many tasks the designer is asked for", validator=_positive
    )
    plays: int = config_option(
        4, help="hint plays of each task, without and with its hint", validator=_positive
    )
    pass_reward: float = config_option(1.0, help="the reward that counts as solved")
    verifier_timeout_seconds: float = config_option(
        30.0, help="each task's verifier timeout (task.toml)", validator=_positive
    )
    agent: dict[str, Any] = config_option(
        factory=dict, help="the agent of the plays (answer_file, max_tokens, temperature)"
    )
    feedback_tasks: int = config_option(
        20, help="how many recent tasks' results the designer is shown", validator=_positive
    )


def _session_line(record: Record) -> str:
    """A recorded call or report, shortened, as the designer reads it."""
    return json.dumps(attrs.asdict(record), ensure_ascii=False, default=str)[:2000]


class SpadeGenerator(TaskGenerator[SpadeSettings]):
    """SPADE (see the module's documentation)."""

    Settings = SpadeSettings

    def __init__(
        self, settings: SpadeSettings, *, designer: Designer, service: GeneratorClient
    ) -> None:
        self.settings = settings
        self.agent = AnswerAgent.parse(settings.agent, plugin_class=type(self), path="$.agent")
        self.designer = designer
        self.service = service
        #: What the designer is told of the last ``feedback_tasks`` tasks, newest last (train
        #: tasks only: a held-out task is never feedback).
        self.feedback: list[str] = []
        self._closed: set[int] = set()

    @classmethod
    def from_settings(
        cls, settings: SpadeSettings, *, scenario: str, environ: Mapping[str, str]
    ) -> SpadeGenerator:
        """SPADE for ``scenario``: its designer, and the generator service ``environ`` names
        (``REEF_GENERATOR_URL``, ``REEF_GENERATOR_TOKEN``)."""
        design = settings.designer
        designer = Designer(
            design.url,
            model=design.model,
            api_key=design.api_key,
            temperature=design.temperature,
            max_tokens=design.max_tokens,
        )
        return cls(
            settings,
            designer=designer,
            service=GeneratorClient.from_environ(environ, scenario=scenario),
        )

    async def generate(self, request: TaskGenerationRequest) -> tuple[HarborTask, ...]:
        """Ask the designer for ``tasks_per_generation`` tasks."""
        prompt = design_prompt(
            request.description,
            count=self.settings.tasks_per_generation,
            answer_file=self.agent.answer_file,
            feedback=self.feedback,
            sources=[_session_line(record) for record in request.source_records],
        )
        return tasks_from_reply(
            await self.designer.ask(prompt),
            generation=request.generation,
            sources=request.source_record_ids,
            verifier_timeout_seconds=self.settings.verifier_timeout_seconds,
        )

    def _solved(self, plays: list[tuple[str, Any]]) -> int:
        return sum(
            1 for _, verdict in plays
            if verdict.reward is not None and verdict.reward >= self.settings.pass_reward
        )  # fmt: skip

    async def validate(self, task: HarborTask) -> TaskValidationResult:
        """The oracle, then the hint plays (see the module's documentation)."""
        oracle = await self.service.oracle(task)
        if oracle.reward is None or oracle.reward < self.settings.pass_reward:
            return TaskValidationResult(
                errors=(
                    f"its oracle solution does not pass its verifier (reward {oracle.reward}, "
                    f"timed out {oracle.timed_out}): {oracle.output[-300:]}",
                )
            )
        hint = hint_of(task)
        if hint is None:
            return TaskValidationResult(errors=("it has no hint for the hint plays",))
        plays = self.settings.plays
        alone = self._solved(await self.service.play(task, rollouts=plays, agent=self.agent))
        if alone == plays:
            return TaskValidationResult(
                errors=(f"too easy: the policy solved all {plays} plays without the hint",)
            )
        if alone == 0:
            helped = self._solved(
                await self.service.play(task, rollouts=plays, hint=hint, agent=self.agent)
            )
            if helped == 0:
                return TaskValidationResult(
                    errors=(
                        f"beyond the policy's frontier: it solved none of {plays} plays, "
                        "even with the hint",
                    )
                )
        return TaskValidationResult()

    async def record_results(
        self, results: tuple[GeneratedTaskResult, ...], *, generation: int
    ) -> None:
        """Remember how the policy did on the generation's train tasks, for the designer;
        a generation already closed is ignored (P-TASK-5)."""
        if generation in self._closed:
            return
        self._closed.add(generation)
        for result in results:
            if isinstance(result, RolledOutTask) and result.rollout_rewards:
                rewards = result.rollout_rewards
                mean = sum(rewards) / len(rewards)
                self.feedback.append(f"{result.task.instruction[:200]!r}: {mean:.2f}")
        # Only the newest feedback_tasks reach a prompt: keep no more.
        del self.feedback[: -self.settings.feedback_tasks]
