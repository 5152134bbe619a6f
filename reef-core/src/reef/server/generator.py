"""The generator service's routes: staging tasks, running their verifiers and hint plays.

They exist when the deployment has a ``generator`` section (else each answers 404 saying so),
and need the ``admin`` scope in the route's scenario, like every route that runs work on the
deployment's machines. The work is
:class:`~reef.record2sample.generator.service.GeneratorService`'s; a task is given as a
value (``task``: the JSON form of a Harbor task) or by name (``task_name``: the staged copy,
else the one saved in the scenario's task store).

- ``POST /reef/scenarios/{scenario}/generator/tasks``: stage a task (idempotent);
- ``POST /reef/scenarios/{scenario}/generator/verify``: its verifier on an attempt, or
  (``oracle: true``) on its oracle solution;
- ``POST /reef/scenarios/{scenario}/generator/play``: plays of the scenario's policy, scored by
  the verifier. The engine is asked directly: a play is no record and never trains.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import anyio.to_thread
import attrs
from starlette.requests import Request
from starlette.responses import Response

from reef.containers.agent import AnswerAgent
from reef.containers.interface import ContainerError
from reef.containers.staging import StagedTask, StagingError
from reef.containers.verify import Verdict
from reef.core.harbor import HarborTask, HarborTaskError
from reef.core.plugins import PluginConfigError
from reef.core.records import JSON
from reef.engines.interface import EngineError
from reef.record2sample.generator.service import GeneratorService, TaskNotFound
from reef.server.bodies import answer, structure
from reef.server.errors import ApiError
from reef.server.names import valid_name
from reef.server.openapi import ApiRoute
from reef.server.request_json import read_json
from reef.server.service import ServedScenario, service_of

__all__ = ["ROUTES"]

#: The most plays one request may ask for.
MAX_PLAYS: Final = 16


@attrs.frozen
class TaskBody:
    """A task, as a value or by name (exactly one).

    :ivar task: the task's JSON form (``name``, ``files``, ``source_agent_record_ids``).
    :ivar task_name: the name of a staged or saved task (a name: no separator, no ``..``).
    """

    task: dict[str, Any] | None = None
    task_name: str | None = attrs.field(default=None, validator=valid_name)


@attrs.frozen
class StagedBody:
    """A staged task: its name and the digest of its files."""

    name: str
    digest: str


@attrs.frozen
class VerifyBody:
    """A verifier run: the task, and the attempt's files (paths relative to ``/app``), or the
    task's oracle solution."""

    task: dict[str, Any] | None = None
    task_name: str | None = attrs.field(default=None, validator=valid_name)
    attempt: dict[str, str] = attrs.field(factory=dict)
    oracle: bool = False


@attrs.frozen
class VerdictBody:
    """A verifier's verdict: the reward it wrote (``null``: none, or it timed out), whether it
    timed out, ``test.sh``'s exit code and the end of the run's output."""

    reward: float | None
    timed_out: bool
    exit_code: int | None
    output: str


@attrs.frozen
class PlayBody:
    """Plays of the scenario's policy on a task.

    :ivar rollouts: how many plays (1 to 16).
    :ivar hint: a hint added to the instruction.
    :ivar agent: the agent's settings (``answer_file``, ``max_tokens``, ``temperature``).
    """

    task: dict[str, Any] | None = None
    task_name: str | None = attrs.field(default=None, validator=valid_name)
    rollouts: int = 1
    hint: str | None = None
    agent: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class PlayResult:
    """One play: the policy's reply and the verifier's verdict."""

    reply: str
    verdict: VerdictBody


@attrs.frozen
class PlaysBody:
    """The plays, in order."""

    plays: tuple[PlayResult, ...]


def _verdict(verdict: Verdict) -> VerdictBody:
    return VerdictBody(verdict.reward, verdict.timed_out, verdict.exit_code, verdict.output)


_B = TypeVar("_B", TaskBody, VerifyBody, PlayBody)


async def _request(request: Request, cls: type[_B]) -> tuple[GeneratorService, ServedScenario, _B]:
    """The generator service, the route's scenario and the request's body, once the caller
    may use it and the body names exactly one task. :raises ApiError: 401, 403, 400, 404."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    body = structure(await read_json(request, service.options.max_body_bytes), cls)
    if (body.task is None) == (body.task_name is None):
        raise ApiError.one(
            400, "invalid_request", "$.task", "give exactly one of task and task_name"
        )
    if service.generator is None:
        raise ApiError.one(
            404,
            "not_found",
            "path",
            "the deployment has no generator section: no generator service",
        )
    return service.generator, scenario, body


async def _task(
    generator: GeneratorService, scenario: str, task: dict[str, Any] | None, name: str | None
) -> StagedTask:
    def stage() -> StagedTask:
        if task is not None:
            staged = generator.stage(scenario, HarborTask.from_json(task))
        else:
            assert name is not None
            staged = generator.staged(scenario, name)
        staged.config()  # every run reads it: one that cannot be read is the request's fault
        return staged

    try:
        return await anyio.to_thread.run_sync(stage)
    except HarborTaskError as exc:
        field = "$.task" if task is not None else "$.task_name"
        raise ApiError.one(400, "invalid_request", field, str(exc)) from None
    except TaskNotFound as exc:
        raise ApiError.one(404, "not_found", "$.task_name", str(exc)) from None
    except StagingError as exc:
        raise ApiError.one(409, "conflict", "$.task", str(exc)) from None


def _container_failure(exc: ContainerError) -> ApiError:
    return ApiError.one(503, "unavailable", "$", f"the task could not run: {exc}")


async def stage_task(request: Request) -> Response:
    """``POST /reef/scenarios/{scenario}/generator/tasks``: stage a task."""
    generator, scenario, body = await _request(request, TaskBody)
    staged = await _task(generator, scenario.name, body.task, body.task_name)
    return answer(StagedBody(staged.name, staged.digest))


async def verify_task(request: Request) -> Response:
    """``POST /reef/scenarios/{scenario}/generator/verify``: a verifier run."""
    generator, scenario, body = await _request(request, VerifyBody)
    staged = await _task(generator, scenario.name, body.task, body.task_name)
    if body.oracle and body.attempt:
        raise ApiError.one(400, "invalid_request", "$.attempt", "an oracle run takes no attempt")
    try:
        if body.oracle:
            verdict = await generator.oracle(staged)
        else:
            verdict = await generator.verify(staged, body.attempt)
    except ValueError as exc:
        raise ApiError.one(400, "invalid_request", "$.attempt", str(exc)) from None
    except ContainerError as exc:
        raise _container_failure(exc) from None
    return answer(_verdict(verdict))


async def play_task(request: Request) -> Response:
    """``POST /reef/scenarios/{scenario}/generator/play``: plays of the policy."""
    generator, scenario, body = await _request(request, PlayBody)
    if not 1 <= body.rollouts <= MAX_PLAYS:
        raise ApiError.one(400, "invalid_request", "$.rollouts", f"ask for 1 to {MAX_PLAYS} plays")
    try:
        agent = AnswerAgent.parse(body.agent, plugin_class=AnswerAgent, path="$.agent")
    except PluginConfigError as exc:
        raise ApiError.one(400, "invalid_request", "$.agent", str(exc)) from None
    engine = scenario.engine
    if engine is None:
        raise ApiError.one(409, "conflict", "scenario", f"scenario {scenario.name!r} has no engine")
    staged = await _task(generator, scenario.name, body.task, body.task_name)

    async def policy(completion_request: JSON) -> JSON:
        # The engine itself, not the inference service: a play is no record (P-TASK-18).
        return (await engine.complete(completion_request)).body

    try:
        plays = await generator.play(
            staged, policy, agent=agent, rollouts=body.rollouts, hint=body.hint
        )
    except EngineError as exc:
        raise ApiError.one(
            502, "engine_error", "scenario", f"the policy did not answer: {exc}"
        ) from None
    except ContainerError as exc:
        raise _container_failure(exc) from None
    return answer(PlaysBody(tuple(PlayResult(p.reply, _verdict(p.verdict)) for p in plays)))


ROUTES: Final = (
    ApiRoute(
        "POST",
        "/reef/scenarios/{scenario}/generator/tasks",
        "stage a task in the generator service (idempotent)",
        stage_task,
        TaskBody,
        {200: StagedBody},
        "admin",
    ),
    ApiRoute(
        "POST",
        "/reef/scenarios/{scenario}/generator/verify",
        "run a task's verifier on an attempt, or on its oracle solution",
        verify_task,
        VerifyBody,
        {200: VerdictBody},
        "admin",
    ),
    ApiRoute(
        "POST",
        "/reef/scenarios/{scenario}/generator/play",
        "play a task with the scenario's policy (no record, never trains)",
        play_task,
        PlayBody,
        {200: PlaysBody},
        "admin",
    ),
)
