"""The generator service: container operations for task generators.

A task generator checks the tasks it makes by running them: the oracle solution must pass the
verifier (validation), and plays of the policy, with or without a hint, tell whether a task
sits at the frontier of what the policy can solve (SPADE's hint plays). It does so through this
service, over HTTP (:mod:`reef.server.generator` holds its routes; ``reef serve`` starts it
from the deployment's ``generator`` section;
:class:`~reef.record2sample.generator.client.GeneratorClient` calls it), so a generator
needs no container runtime, and no file system it shares with Reef.

:class:`GeneratorService` does the work:

- **staging**: every task runs from its staged copy under ``<tasks root>/<scenario>/<name>``
  (:class:`~reef.containers.staging.TaskStaging`). A request gives the task as a value (staged,
  or the staged copy returned) or by name: the staged copy, else the task as the scenario's
  task store keeps it, staged again (P-TASK-26), so a service restarted with an empty tasks
  root still runs a saved task;
- **verify**: a task's verifier on an attempt (:func:`~reef.containers.verify.run_verifier`)
  or on its oracle solution (:func:`~reef.containers.verify.run_oracle`);
- **play**: rollouts of the policy on the task, scored by the verifier. A play asks the
  scenario's engine directly, never through the inference service, so it is no record and
  never trains (P-TASK-18).

Runs happen on worker threads, at most ``max_parallel_runs`` at once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import attrs

from reef.containers.agent import AnswerAgent
from reef.containers.backends import open_backend
from reef.containers.interface import ContainerBackend
from reef.containers.staging import StagedTask, TaskStaging, folder_under
from reef.containers.verify import Verdict, run_oracle, run_verifier
from reef.core.deployment import GeneratorSection
from reef.core.harbor import HarborTask
from reef.core.records import JSON
from reef.errors import ReefError

__all__ = ["GeneratorService", "Play", "Policy", "TaskNotFound", "TaskSource"]

#: Reads a saved task of a scenario by name (``None``: no such task); the service's source for
#: restaging (the scenario's task store).
TaskSource = Callable[[str, str], HarborTask | None]
#: Answers one OpenAI chat-completions request with its ``chat.completion`` body.
Policy = Callable[[JSON], Awaitable[JSON]]


class TaskNotFound(ReefError, LookupError):
    """A request names a task that is neither staged nor saved in the scenario's task store."""


@attrs.frozen
class Play:
    """One play of a task: the policy's reply and the verifier's verdict on it."""

    reply: str
    verdict: Verdict


def _reply(completion: Mapping[str, Any]) -> str:
    choices = completion.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        message = choices[0].get("message")
        if isinstance(message, Mapping) and isinstance(message.get("content"), str):
            return str(message["content"])
    return ""


class GeneratorService:
    """The generator service's work (see the module's documentation).

    :param section: the deployment's ``generator`` section.
    :param task_source: reads a scenario's saved task by name.
    :param backend: the container backend (the one the section names when ``None``).
    :raises reef.containers.interface.ContainerError: when that backend cannot work here.
    """

    def __init__(
        self,
        section: GeneratorSection,
        *,
        task_source: TaskSource,
        backend: ContainerBackend | None = None,
    ) -> None:
        self.section = section
        self.root = Path(section.tasks_root)
        self._source = task_source
        self.backend = backend or open_backend(section.containers, self.root / ".runs")
        self._slots = anyio.Semaphore(section.max_parallel_runs)

    def staging(self, scenario: str) -> TaskStaging:
        """The staged tasks of ``scenario``, under ``<tasks root>/<scenario>``.

        :raises reef.containers.staging.StagingError: when ``scenario`` is not a folder name
            under the tasks root (:func:`~reef.containers.staging.folder_under`).
        """
        return TaskStaging(folder_under(self.root, scenario))

    def stage(self, scenario: str, task: HarborTask) -> StagedTask:
        """Stage ``task`` (idempotent; see :meth:`TaskStaging.stage`)."""
        return self.staging(scenario).stage(task)

    def staged(self, scenario: str, name: str) -> StagedTask:
        """The staged copy of the task ``name``, staged again from the task store when the
        tasks root lost it.

        :raises TaskNotFound: when the scenario has no such task.
        """
        staging = self.staging(scenario)
        found = staging.staged(name)
        if found is not None:
            return found
        saved = self._source(scenario, name)
        if saved is None:
            raise TaskNotFound(f"scenario {scenario!r} has no saved task {name!r}")
        return staging.stage(saved)

    async def _run(self, work: Callable[[], Verdict]) -> Verdict:
        async with self._slots:
            return await anyio.to_thread.run_sync(work)

    async def verify(self, staged: StagedTask, attempt: Mapping[str, str]) -> Verdict:
        """The task's verifier on ``attempt`` (files relative to ``/app``)."""
        limits = self.section.containers
        return await self._run(lambda: run_verifier(self.backend, staged, attempt, limits))

    async def oracle(self, staged: StagedTask) -> Verdict:
        """The task's oracle solution, then its verifier."""
        limits = self.section.containers
        return await self._run(lambda: run_oracle(self.backend, staged, limits))

    async def play(
        self,
        staged: StagedTask,
        policy: Policy,
        *,
        agent: AnswerAgent,
        rollouts: int,
        hint: str | None = None,
    ) -> list[Play]:
        """``rollouts`` plays of the policy on the task, each scored by its verifier."""
        instruction = staged.instruction()
        plays: list[Play] = []
        for _ in range(rollouts):
            reply = _reply(await policy(agent.request(instruction, hint)))
            plays.append(Play(reply, await self.verify(staged, agent.attempt(reply))))
        return plays
