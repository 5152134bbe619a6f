"""Task jobs: a job's tasks rolled out on the component's own sampler, scored, and grouped.

A job of :class:`~reef.core.job_data.TaskSample` values trains on rollouts that the training
component makes itself (P-TASK-14), at the job's start weights, before its first step:

1. each task is staged under the component's tasks root (:mod:`reef.containers.staging`; the
   job's data is the source, so a restarted component stages it again);
2. the sampler plays it ``rollout.rollouts_per_task`` times with the rollout's agent
   (:class:`~reef.containers.agent.AnswerAgent`: the instruction as one chat turn, the reply
   left as the attempt), keeping each rollout's exact tokens and its sampler's log
   probabilities, which the component trains as they are (P-REND-6);
3. the task's verifier scores each rollout in the rollout's sandbox
   (:mod:`reef.containers.verify`); a verifier that runs past its timeout scores
   ``rollout.verifier_timeout_reward`` (P-TASK-7), a verifier that writes no reward scores 0;
4. :func:`task_group_advantages` centres and scales the rewards within each task's group (the
   ``task_group`` objective), on groups of at least two rollouts.

The job reports ``rollout_rewards`` (each task's rewards, in rollout order, as the start
weights scored them) and ``rollout_failures`` (a task none of whose rollouts ran: it could not
be staged, or its sandbox failed: ``infrastructure_failure``). Each rollout names the artifact
that sampled it in ``training.artifact_id`` (P-STALE-4). Nothing here needs PyTorch: the
component gives the sampler.
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from reef.containers.agent import AnswerAgent
from reef.containers.backends import open_backend
from reef.containers.interface import ContainerError
from reef.containers.staging import StagingError, TaskStaging
from reef.containers.verify import run_verifier
from reef.core.config import config_option
from reef.core.container_settings import ContainerSettings
from reef.core.harbor import HarborTask, HarborTaskError
from reef.core.job_data import JobData, TaskSample
from reef.core.plugins import PluginSettings
from reef.core.records import JSON

if TYPE_CHECKING:  # the renderer needs jinja2; reef check reads the rollout parameters without
    from reef.core.chat_rendering import RenderedSequence, Tokenizer

__all__ = [
    "Rollout",
    "RolloutParameters",
    "Sampled",
    "Sampler",
    "TaskRollouts",
    "reply_text",
    "roll_out_tasks",
    "task_group_advantages",
    "task_metrics",
]


def _finite(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"{attribute.name} must be a finite number, got {value!r}")


@attrs.frozen
class RolloutParameters(PluginSettings):
    """How a task job rolls out each of its tasks: the job parameters' ``rollout`` (P-TASK-13).

    The generated-task recipe sets it from ``recipe.config.job_parameters.rollout``. The
    component runs ``rollouts_per_task`` rollouts of each task on its own sampler, at the job's
    start weights, scores each with the task's verifier, and trains each task's group.

    :ivar rollouts_per_task: how many rollouts of each task run; a task's group trains only
        with at least two samples, so 1 measures a task without training on it.
    :ivar verifier_timeout_reward: the reward of a rollout whose verifier ran past its timeout
        (P-TASK-7): the task's oracle passed the same verifier, so the timeout is the agent's.
    :ivar agent: the agent that plays each rollout (a single chat turn whose reply is the
        attempt the verifier reads).
    :ivar sandbox: where each rollout's verifier runs, and its limits.
    """

    rollouts_per_task: int = config_option(
        4,
        help="how many rollouts of each task a task job runs (a task trains with at least 2)",
        validator=attrs.validators.ge(1),
    )
    verifier_timeout_reward: float = config_option(
        0.0, help="the reward of a rollout whose verifier timed out", validator=_finite
    )
    agent: AnswerAgent = config_option(
        factory=AnswerAgent,
        help="the agent that plays each rollout: answer_file, max_tokens, temperature",
    )
    sandbox: ContainerSettings = config_option(
        factory=ContainerSettings,
        help="where each rollout's verifier runs: backend (sandbox, docker) and limits",
    )


@attrs.frozen
class Sampled:
    """One sampled reply: its tokens, the sampler's log probability of each, and its text."""

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str


#: Samples ``count`` replies to a chat-completions request at the start weights:
#: ``(prompt tokens, replies)``.
Sampler = Callable[[JSON, int], tuple[tuple[int, ...], list[Sampled]]]


@attrs.frozen
class Rollout:
    """One rollout that ran and trains.

    :ivar sample: the index of its task in the job's samples.
    :ivar task: the task's name (its group).
    :ivar prompt: the prompt's tokens.
    :ivar reply: the reply's tokens, exactly as sampled.
    :ivar logprobs: the sampler's log probability of each reply token.
    :ivar reward: the verifier's reward.
    """

    sample: int
    task: str
    prompt: tuple[int, ...]
    reply: tuple[int, ...]
    logprobs: tuple[float, ...]
    reward: float

    def sequence(self) -> RenderedSequence:
        """The rollout as the sequence that trains: the prompt as context, the reply trained."""
        from reef.core.chat_rendering import RenderedSequence  # only a component trains it

        return RenderedSequence(
            (*self.prompt, *self.reply), (0,) * len(self.prompt) + (1,) * len(self.reply)
        )

    def start_logprobs(self) -> tuple[float, ...]:
        """The sampler's log probabilities on the rows of the sequence's next-token predictions
        (``len(sequence) - 1``): the row of position ``i`` predicts token ``i + 1``, so the
        reply's start at ``len(prompt) - 1``; the prompt's rows are 0 (they do not train)."""
        return (0.0,) * (len(self.prompt) - 1) + self.logprobs


@attrs.frozen
class TaskRollouts:
    """A job's rollouts, and what it reports of them."""

    rollouts: tuple[Rollout, ...]
    rewards: Mapping[str, list[float]]
    failures: Mapping[str, JSON]


def reply_text(tokenizer: Tokenizer, token_ids: Sequence[int]) -> str:
    """A sampled reply's text: its tokens decoded, less the stop token that ended it."""
    ids = list(token_ids)
    if ids and ids[-1] in set(tokenizer.stop_token_ids):
        ids = ids[:-1]
    return tokenizer.decode(ids)


def roll_out_tasks(
    data: JobData,
    rollout: RolloutParameters,
    *,
    sampler: Sampler,
    tasks_root: Path,
) -> TaskRollouts:
    """Roll out every task of ``data`` (see the module's documentation).

    :raises ValueError: for job data that holds a trajectory sample.
    """
    samples = [s for s in data.samples if isinstance(s, TaskSample)]
    if len(samples) != len(data.samples):
        raise ValueError("a task job trains task samples only; this job holds trajectories")
    staging = TaskStaging(tasks_root)
    rollouts: list[Rollout] = []
    rewards: dict[str, list[float]] = {}
    failures: dict[str, JSON] = {}
    backend = None
    for index, sample in enumerate(samples):
        try:
            task = HarborTask.from_json(sample.task)
            staged = staging.stage(task)
            if backend is None:
                backend = open_backend(rollout.sandbox, tasks_root / ".runs")
            prompt, replies = sampler(
                rollout.agent.request(staged.instruction()), rollout.rollouts_per_task
            )
            for reply in replies:
                attempt = rollout.agent.attempt(reply.text)
                verdict = run_verifier(backend, staged, attempt, rollout.sandbox)
                if verdict.timed_out:
                    reward = rollout.verifier_timeout_reward
                else:
                    reward = 0.0 if verdict.reward is None else verdict.reward
                rewards.setdefault(sample.name, []).append(reward)
                rollouts.append(
                    Rollout(index, sample.name, prompt, reply.token_ids, reply.logprobs, reward)
                )
        except (HarborTaskError, StagingError, ContainerError, OSError) as exc:
            if sample.name not in rewards:
                failures[sample.name] = {
                    "error": traceback.format_exception_only(exc)[-1].strip(),
                    "infrastructure_failure": True,
                }
    return TaskRollouts(tuple(rollouts), rewards, failures)


def task_group_advantages(rollouts: Sequence[Rollout]) -> dict[int, float]:
    """The ``task_group`` objective's advantage of each rollout, by its index in
    ``rollouts``: its reward minus its task's mean, divided by the task's standard deviation
    (1 when the rewards are all equal, so they give 0). A task with fewer than two rollouts
    forms no group and does not train."""
    groups: dict[str, list[int]] = {}
    for index, rollout in enumerate(rollouts):
        groups.setdefault(rollout.task, []).append(index)
    advantages: dict[int, float] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        values = [rollouts[i].reward for i in members]
        mean = sum(values) / len(values)
        spread = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        scale = spread if spread > 1e-8 else 1.0
        for i in members:
            advantages[i] = (rollouts[i].reward - mean) / scale
    return advantages


def task_metrics(
    done: TaskRollouts,
    *,
    trained_samples: int,
    losses: Sequence[float],
    trained_tokens: int,
    dropped_samples: int,
    artifact_id: str,
    optimizer_steps: int,
) -> JSON:
    """A finished task job's metrics (``docs/generator-service.md``), in every component.

    :param trained_samples: the rollouts that trained (in groups of at least two).
    :param artifact_id: the artifact of the job's start weights, which sampled every rollout.
    :param optimizer_steps: the steps that moved the weights (as :func:`job_metrics`).
    """
    rewards = [r.reward for r in done.rollouts]
    rollouts: list[Any] = [
        {
            "task": r.task,
            "reward": r.reward,
            "reply_tokens": len(r.reply),
            "training": {"artifact_id": artifact_id},
        }
        for r in done.rollouts
    ]
    return {
        "loss": sum(losses) / len(losses) if losses else None,
        "step_losses": list(losses),
        "steps": len(losses),
        "optimizer_steps": optimizer_steps,
        "samples": trained_samples - dropped_samples,
        "dropped_samples": dropped_samples,
        "trained_tokens": trained_tokens,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "objective": "task_group",
        "rollout_rewards": {name: list(values) for name, values in done.rewards.items()},
        "rollout_failures": dict(done.failures),
        "rollouts": rollouts,
    }
