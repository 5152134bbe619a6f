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

import asyncio
import json
import uuid
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
from reef_spade.designer import (
    Designer,
    DesignerCall,
    DesignerError,
    call_of,
    design_prompt,
    hint_of,
    tasks_from_reply,
)
from reef_spade.regret import RegretReports, designer_scenario, mean_reward, regret

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
    report_regret: bool = config_option(
        False,
        help="train the designer: ask it for one task a call, and report each call, to the Reef "
        "scenario that serves it (url: <reef>/scenarios/<scenario>/v1), with its task's "
        "hint-based regret as the score and the generation as metadata.group",
    )
    report_token: str | None = config_option(
        None, help="report_regret: a Reef token with the feedback scope (${ENV}); unset: api_key"
    )

    def __attrs_post_init__(self) -> None:
        if self.report_regret and designer_scenario(self.url) is None:
            raise ValueError(
                "report_regret reports each designer call to the Reef scenario that serves the "
                f"designer: url must be <reef>/scenarios/<scenario>/v1, not {self.url!r}"
            )


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
        design = settings.designer
        served = designer_scenario(design.url) if design.report_regret else None
        #: Where the designer's calls are reported with their regret (``report_regret``).
        self.reports = (
            None
            if served is None
            else RegretReports(*served, design.report_token or design.api_key)
        )
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
        """Ask the designer for ``tasks_per_generation`` tasks: in one call, or, to train it
        (``report_regret``), one task a call."""
        count = self.settings.tasks_per_generation
        prompt = design_prompt(
            request.description,
            count=1 if self.reports is not None else count,
            answer_file=self.agent.answer_file,
            feedback=self.feedback,
            sources=[_session_line(record) for record in request.source_records],
        )
        if self.reports is None:
            return tasks_from_reply(
                (await self.designer.ask(prompt)).text,
                generation=request.generation,
                sources=request.source_record_ids,
                verifier_timeout_seconds=self.settings.verifier_timeout_seconds,
            )
        return await self._designed_one_a_call(request, prompt, count, self.reports)

    async def _designed_one_a_call(
        self, request: TaskGenerationRequest, prompt: str, count: int, reports: RegretReports
    ) -> tuple[HarborTask, ...]:
        """``count`` calls of one task each, in one comparison group: a call whose reply holds
        no valid task is reported now with a regret of 0 (as the authors score an invalid
        proposal); the others when their task is validated. A call that fails fails the
        generation before anything is reported, so every group that is reported is whole."""
        answers = await asyncio.gather(
            *(self.designer.ask(prompt) for _ in range(count)), return_exceptions=True
        )
        replies = []
        for answer in answers:
            if isinstance(answer, BaseException):
                raise answer
            if answer.record_id is None:
                raise DesignerError(
                    "report_regret: the designer's answer carries no x-reef-record-id, so Reef "
                    "did not record the call (is designer.url a Reef scenario's?)"
                )
            replies.append((answer.text, answer.record_id))
        group = f"spade-{request.generation}-{uuid.uuid4().hex[:12]}"
        tasks: list[HarborTask] = []
        for index, (text, record_id) in enumerate(replies):
            call = DesignerCall(record_id, group)
            try:
                proposed = tasks_from_reply(
                    text,
                    generation=request.generation,
                    sources=request.source_record_ids,
                    verifier_timeout_seconds=self.settings.verifier_timeout_seconds,
                    first_index=index,
                    call=call,
                )
            except DesignerError as exc:
                await reports.report(call, 0.0, refused=str(exc)[:300])
                continue
            if not proposed:
                await reports.report(call, 0.0, refused="the reply holds no task")
                continue
            tasks.append(proposed[0])  # one task was asked for: the first is the proposal
        return tuple(tasks)

    def _solved(self, plays: list[tuple[str, Any]]) -> int:
        return sum(
            1 for _, verdict in plays
            if verdict.reward is not None and verdict.reward >= self.settings.pass_reward
        )  # fmt: skip

    async def validate(self, task: HarborTask) -> TaskValidationResult:
        """The oracle, then the hint plays (see the module's documentation); a task from a
        designer call that is trained is reported with its regret."""
        call = call_of(task) if self.reports is not None else None
        oracle = await self.service.oracle(task)
        if oracle.reward is None or oracle.reward < self.settings.pass_reward:
            reason = (
                f"its oracle solution does not pass its verifier (reward {oracle.reward}, "
                f"timed out {oracle.timed_out}): {oracle.output[-300:]}"
            )
            return await self._refused(call, reason)
        hint = hint_of(task)
        if hint is None:
            return await self._refused(call, "it has no hint for the hint plays")
        plays = self.settings.plays
        alone = await self.service.play(task, rollouts=plays, agent=self.agent)
        solved_alone = self._solved(alone)
        helped = None
        if call is not None or solved_alone == 0:
            # The regret needs both arms; the frontier, the hinted arm only when alone failed.
            helped = await self.service.play(task, rollouts=plays, hint=hint, agent=self.agent)
        if call is not None and self.reports is not None and helped is not None:
            without = [verdict.reward for _, verdict in alone]
            withhint = [verdict.reward for _, verdict in helped]
            await self.reports.report(
                call,
                regret(without, withhint),
                task=task.name,
                r_no_hint=mean_reward(without),
                r_hint=mean_reward(withhint),
            )
        if solved_alone == plays:
            return TaskValidationResult(
                errors=(f"too easy: the policy solved all {plays} plays without the hint",)
            )
        if solved_alone == 0 and helped is not None and self._solved(helped) == 0:
            return TaskValidationResult(
                errors=(
                    f"beyond the policy's frontier: it solved none of {plays} plays, "
                    "even with the hint",
                )
            )
        return TaskValidationResult()

    async def _refused(self, call: DesignerCall | None, reason: str) -> TaskValidationResult:
        """A task that is not valid: its designer call, when trained, scores 0."""
        if call is not None and self.reports is not None:
            await self.reports.report(call, 0.0, refused=reason[:300])
        return TaskValidationResult(errors=(reason,))

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
