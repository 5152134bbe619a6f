"""What every training component does with a job's samples around its own training loop.

Each component (``local``, ``tinker``, ``slime``) trains in its own way, but what a job's
samples *mean* is the same everywhere, so it is computed here once:

- :func:`prepare_job` renders the job's trajectory samples with the component's renderer
  (P-REND-3), leaves out and counts what cannot train (``unrenderable_samples``, P-REND-5), and,
  for an objective that needs a reward, reads each sample's reward and centres it in its group
  (:func:`group_advantages`); a sample without a finite reward is left out and counted in
  ``samples_without_reward`` (P-UP-9).
- :func:`consumed_lines` writes what one optimizer step's loss consumed, a line per sample (the
  ``consumed`` metric Agent ECC's plugin reads).
- :class:`JobParameters` are the job parameters every built-in component takes.
- :func:`job_metrics` names a finished job's metrics, so every component reports the same keys.

Nothing here needs PyTorch.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from reef.components.interface import Scheduling
from reef.components.scheduling import StepPlan
from reef.core.chat_rendering import ChatRenderer, RenderedSample, render_samples
from reef.core.config import config_option
from reef.core.job_data import JobData, TrajectorySample, sample_reward
from reef.core.plugins import PluginSettings
from reef.core.records import JSON

#: Every objective, as job parameters name them.
OBJECTIVES: Final = ("cross_entropy", "importance_sampling")


def group_advantages(rewards: Sequence[float], groups: Sequence[str | None]) -> list[float]:
    """Each reward minus the mean reward of its group.

    Samples without a group form one group together: the job's ungrouped samples are compared
    with each other, so a recipe that does not group still learns which replies scored better.
    """
    members: dict[str | None, list[float]] = defaultdict(list)
    for reward, group in zip(rewards, groups, strict=True):
        members[group].append(reward)
    means = {group: sum(values) / len(values) for group, values in members.items()}
    return [reward - means[group] for reward, group in zip(rewards, groups, strict=True)]


@attrs.frozen
class PreparedJob:
    """A job's samples, rendered and scored, before a component trains them.

    :ivar samples: the job's trajectory samples, in job order.
    :ivar rendered: ``(index into samples, rendering)`` of each sample that trains, in job order.
    :ivar advantages: each training sample's advantage by its index into ``samples``
        (``importance_sampling`` only; empty for ``cross_entropy``).
    :ivar unrenderable_samples: samples left out because they cannot render or are too long.
    :ivar samples_without_reward: samples left out because the objective needs a reward and
        they have none.
    """

    objective: str
    samples: tuple[TrajectorySample, ...]
    rendered: tuple[tuple[int, RenderedSample], ...]
    advantages: Mapping[int, float]
    unrenderable_samples: int
    samples_without_reward: int

    def reward_of(self, position: int) -> float | None:
        """The reward the sample at ``position`` of :attr:`rendered` trains with (``None``
        under an objective that uses none)."""
        index = self.rendered[position][0]
        return sample_reward(self.samples[index]) if index in self.advantages else None

    def advantage_of(self, position: int) -> float:
        """The advantage of the sample at ``position`` of :attr:`rendered` (0 without one)."""
        return self.advantages.get(self.rendered[position][0], 0.0)

    @property
    def sequence_lengths(self) -> list[list[int]]:
        """The token count of each sequence of each rendered sample: what steps are planned on."""
        return [[len(seq.token_ids) for seq in sample.sequences] for _, sample in self.rendered]


def prepare_job(
    data: JobData,
    renderer: ChatRenderer,
    objective: str,
    *,
    max_seq_len: int | None,
    component: str,
) -> PreparedJob:
    """Render and score a job's samples (see the module's documentation).

    :param max_seq_len: the longest sequence the model reads; a sample with a longer one is
        left out (``None``: no limit beyond each sample's ``extra.reef.max_tokens``).
    :param component: the component's name, for the error below.
    :raises ValueError: for job data of task samples, which this needs rolled out first.
    """
    samples = tuple(s for s in data.samples if isinstance(s, TrajectorySample))
    if len(samples) != len(data.samples):
        raise ValueError(
            f"the {component} component trains trajectory samples; it does not roll out tasks"
        )
    batch = render_samples(renderer, [s.trajectory for s in samples])
    rendered: list[tuple[int, RenderedSample]] = []
    unrenderable = batch.unrenderable_samples
    for index, sample in batch.rendered:
        if max_seq_len is not None and any(
            len(s.token_ids) > max_seq_len for s in sample.sequences
        ):
            unrenderable += 1  # longer than the model reads: it cannot train (P-REND-5)
        else:
            rendered.append((index, sample))
    advantages: dict[int, float] = {}
    samples_without_reward = 0
    if objective == "importance_sampling":
        rewarded = [(i, r) for i, _ in rendered if (r := sample_reward(samples[i])) is not None]
        samples_without_reward = len(rendered) - len(rewarded)
        centred = group_advantages(
            [r for _, r in rewarded], [samples[i].group_id for i, _ in rewarded]
        )
        advantages = {i: a for (i, _), a in zip(rewarded, centred, strict=True)}
        rendered = [(i, s) for i, s in rendered if i in advantages]
    return PreparedJob(
        objective, samples, tuple(rendered), advantages, unrenderable, samples_without_reward
    )


def consumed_lines(step: int, loss_tokens: Mapping[int, int], job: PreparedJob) -> list[JSON]:
    """What one step's loss consumed: a line per sample, with the tokens its loss counted and
    the reward and advantage it trained with (``None`` where the objective uses none).

    :param loss_tokens: the tokens the step's loss counted, by position in ``job.rendered``.
    """
    return [
        {
            "sample_id": job.samples[job.rendered[position][0]].sample_id,
            "step": step,
            "loss_tokens": tokens,
            "reward": job.reward_of(position),
            "advantage": job.advantages.get(job.rendered[position][0]),
        }
        for position, tokens in loss_tokens.items()
    ]


def job_metrics(
    job: PreparedJob,
    plan: StepPlan,
    *,
    losses: Sequence[float],
    trained_tokens: int,
    consumed: Sequence[JSON],
) -> JSON:
    """The metrics of a finished job, under the names every component reports."""
    rewards = [r for i, _ in job.rendered if (r := sample_reward(job.samples[i])) is not None]
    return {
        "loss": sum(losses) / len(losses) if losses else None,
        "step_losses": list(losses),
        "steps": len(losses),
        "samples": len(job.rendered) - plan.dropped_samples,
        "unrenderable_samples": job.unrenderable_samples,
        "samples_without_reward": job.samples_without_reward,
        "dropped_samples": plan.dropped_samples,
        "tokens": sum(s.num_tokens for _, s in job.rendered),
        "trained_tokens": trained_tokens,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "objective": job.objective,
        "consumed": list(consumed),
    }


def _known_objective(_: object, __: attrs.Attribute[Any], value: str) -> None:
    if value not in OBJECTIVES:
        raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}, got {value!r}")


@attrs.frozen
class JobParameters(PluginSettings):
    """The job parameters every built-in component takes (the recipe's ``job_parameters``)."""

    objective: str = config_option(
        "cross_entropy",
        help="cross_entropy (SFT) or importance_sampling (reported feedback)",
        validator=_known_objective,
    )
    scheduling: Scheduling = config_option(
        factory=Scheduling, help="remainder (train, drop, pad) and packing_length"
    )
    learning_rate: float | None = config_option(
        None, help="this job's learning rate; the component's when unset", validator=None
    )
