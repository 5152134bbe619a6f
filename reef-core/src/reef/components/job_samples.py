"""What every training component does with a job's samples around its own training loop.

Each component (``local``, ``tinker``, ``slime``) trains in its own way, but what a job's
samples *mean* is the same everywhere, so it is computed here once:

- :func:`prepare_job` renders the job's trajectory samples with the component's renderer
  (P-REND-3), and under a distilling objective each sample's teacher sequence
  (:func:`reef.core.teacher_rendering.render_teacher`); it leaves out and counts what cannot
  train (``unrenderable_samples``, P-REND-5), and, for an objective that needs a reward, reads
  each sample's reward and turns it into an advantage within its group by the estimator the job
  data's metadata names (:mod:`reef.components.advantages`: the group's mean by default, or
  TTT-Discover's entropic weights; the job parameter ``reward_baseline: none`` trains the reward
  as it is); a sample without a finite reward is left out and counted in
  ``samples_without_reward`` (P-UP-9).
- :func:`consumed_lines` writes what one optimizer step's loss consumed, a line per sample (the
  ``consumed`` metric Agent ECC's plugin reads).
- :class:`JobParameters` are the job parameters every built-in component takes, with
  :class:`DistillationParameters` and its :class:`TeacherSettings` for a distilling objective,
  and the :class:`~reef.components.task_rollouts.RolloutParameters` of a task job (how each
  task is rolled out).
- :func:`job_metrics` names a finished job's metrics, so every component reports the same keys.

Nothing here needs PyTorch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from reef.components.advantages import AdvantageSettings, group_advantages
from reef.components.interface import Scheduling
from reef.components.scheduling import StepPlan
from reef.components.task_rollouts import RolloutParameters
from reef.core.chat_rendering import ChatRenderer, RenderedSample, RenderError, render_samples
from reef.core.config import config_option
from reef.core.job_data import JobData, TrajectorySample, sample_reward
from reef.core.plugins import PluginConfigError, PluginSettings
from reef.core.records import JSON
from reef.core.teacher_rendering import render_teacher, sample_teacher

#: Every objective, as job parameters name them.
OBJECTIVES: Final = ("cross_entropy", "importance_sampling", "ppo", "task_group")
#: The objectives that train a per-token advantage, with the start weights' log probabilities.
POLICY_OBJECTIVES: Final = ("importance_sampling", "ppo")
#: How a reward becomes a sample's advantage: less its group's mean, or as it is.
REWARD_BASELINES: Final = ("group_mean", "none")


@attrs.frozen
class PreparedJob:
    """A job's samples, rendered and scored, before a component trains them.

    :ivar samples: the job's trajectory samples, in job order.
    :ivar rendered: ``(index into samples, rendering)`` of each sample that trains, in job order.
    :ivar advantages: each training sample's advantage by its index into ``samples``
        (``importance_sampling`` and ``ppo``; empty for ``cross_entropy``); under a distilling
        objective, the reward's part only, weighted by ``reward_coef`` (0 without it).
    :ivar teachers: under a distilling objective, each training sample's teacher sequence by
        its index into ``samples`` (:func:`reef.core.teacher_rendering.render_teacher`).
    :ivar unrenderable_samples: samples left out because they cannot render, are too long, or
        have a teacher sequence that cannot render or is too long.
    :ivar samples_without_reward: samples left out because the objective needs a reward and
        they have none.
    """

    objective: str
    samples: tuple[TrajectorySample, ...]
    rendered: tuple[tuple[int, RenderedSample], ...]
    advantages: Mapping[int, float]
    unrenderable_samples: int
    samples_without_reward: int
    teachers: Mapping[int, RenderedSample] = attrs.field(factory=dict)

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
    distillation: DistillationParameters | None = None,
    reward_baseline: str = "group_mean",
) -> PreparedJob:
    """Render and score a job's samples (see the module's documentation).

    :param max_seq_len: the longest sequence the model reads; a sample with a longer one (or a
        longer teacher sequence) is left out (``None``: no limit beyond each sample's
        ``extra.reef.max_tokens`` and its teacher request's ``max_tokens``).
    :param component: the component's name, for the error below.
    :param distillation: a distilling objective's parameters: each sample's teacher sequence is
        rendered, and the reward trains only with a ``reward_coef`` other than 0.
    :param reward_baseline: ``group_mean`` or ``none`` (:func:`group_advantages`).
    :raises ValueError: for job data of task samples, which this needs rolled out first.
    :raises reef.core.plugins.PluginConfigError: for an ``advantage`` in the job data's metadata
        that :class:`AdvantageSettings` refuses.
    """
    samples = tuple(s for s in data.samples if isinstance(s, TrajectorySample))
    if len(samples) != len(data.samples):
        raise ValueError(
            f"the {component} component trains trajectory samples; it does not roll out tasks"
        )
    batch = render_samples(renderer, [s.trajectory for s in samples])
    rendered: list[tuple[int, RenderedSample]] = []
    teachers: dict[int, RenderedSample] = {}
    unrenderable = batch.unrenderable_samples
    for index, sample in batch.rendered:
        if max_seq_len is not None and any(
            len(s.token_ids) > max_seq_len for s in sample.sequences
        ):
            unrenderable += 1  # longer than the model reads: it cannot train (P-REND-5)
            continue
        if distillation is not None:
            try:
                teachers[index] = render_teacher(
                    renderer,
                    sample_teacher(samples[index].trajectory),
                    sample,
                    max_tokens=max_seq_len,
                )
            except RenderError:
                unrenderable += 1  # its teacher sequence cannot be scored (P-REND-5)
                continue
        rendered.append((index, sample))
    advantages: dict[int, float] = {}
    samples_without_reward = 0
    if objective in POLICY_OBJECTIVES:
        weight = 1.0 if distillation is None else distillation.reward_coef
        if weight == 0:
            advantages = {i: 0.0 for i, _ in rendered}  # the teacher's signal alone
        else:
            rewarded = [(i, r) for i, _ in rendered if (r := sample_reward(samples[i])) is not None]
            samples_without_reward = len(rendered) - len(rewarded)
            estimator = AdvantageSettings.parse(
                data.metadata.get("advantage"),
                plugin_class=type(data),
                path="$.metadata.advantage",
            )
            if reward_baseline == "none":
                estimator = attrs.evolve(estimator, estimator="none")
            centred = group_advantages(
                [r for _, r in rewarded], [samples[i].group_id for i, _ in rewarded], estimator
            )
            advantages = {i: weight * a for (i, _), a in zip(rewarded, centred, strict=True)}
            rendered = [(i, s) for i, s in rendered if i in advantages]
    return PreparedJob(
        objective,
        samples,
        tuple(rendered),
        advantages,
        unrenderable,
        samples_without_reward,
        {i: teachers[i] for i, _ in rendered if i in teachers},
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


def _known_baseline(_: object, __: attrs.Attribute[Any], value: str) -> None:
    if value not in REWARD_BASELINES:
        raise ValueError(
            f"reward_baseline must be one of {', '.join(REWARD_BASELINES)}, got {value!r}"
        )


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must be 0 or more, got {value!r}")


@attrs.frozen
class TeacherSettings(PluginSettings):
    """The teacher of a distilling objective: a model that scores the student's tokens.

    One of: ``model_path``, a local model folder (a Hugging Face causal LM that transformers
    loads, or a folder the ``local`` component saved) run by the component; ``base_url``, an
    OpenAI-compatible engine that returns prompt log probabilities (vLLM's ``prompt_logprobs``
    on ``/v1/completions``); or neither: the student itself at the job's start weights, which
    a teacher request with more context than the student saw turns into a teacher (SDPO).
    """

    model_path: str | None = config_option(
        None, help="a local model folder the component loads as the teacher"
    )
    base_url: str | None = config_option(
        None,
        help="an OpenAI-compatible engine's base URL (ending in /v1) that answers "
        "prompt_logprobs, as vLLM does",
    )
    model: str | None = config_option(None, help="the engine's model name (with base_url)")
    api_key: str | None = config_option(
        None, help="the engine's API key (a ${ENV} reference in the deployment)"
    )
    timeout_seconds: float = config_option(
        60.0, help="how long one engine call may take", validator=attrs.validators.gt(0)
    )
    attempts: int = config_option(
        3, help="engine calls per sequence before the job fails", validator=attrs.validators.ge(1)
    )

    def __attrs_post_init__(self) -> None:
        if self.model_path is not None and self.base_url is not None:
            raise ValueError("a teacher is a model_path or a base_url, not both")
        if self.base_url is None and (self.model is not None or self.api_key is not None):
            raise ValueError("model and api_key name an engine's model: set base_url")


@attrs.frozen
class DistillationParameters(PluginSettings):
    """A distilling objective: the teacher's per-token reverse KL as the advantage.

    For each trained token ``y_t`` of the student's reply, the advantage is
    ``-kl_coef * (log p_student(y_t) - log p_teacher(y_t))`` (the student's log probability at
    the job's start weights, the teacher's in its teacher sequence), plus
    ``reward_coef`` times the sample's reward advantage when ``reward_coef`` is not 0.
    """

    teacher: TeacherSettings = config_option(
        factory=TeacherSettings,
        help="the teacher: model_path, base_url (with model, api_key), or neither (the student "
        "at the job's start weights)",
    )
    kl_coef: float = config_option(
        1.0, help="weight of the per-token reverse KL in the advantage", validator=_non_negative
    )
    reward_coef: float = config_option(
        0.0,
        help="weight of the task reward's advantage beside it (0: samples need no reward)",
        validator=_non_negative,
    )


@attrs.frozen
class JobParameters(PluginSettings):
    """The job parameters every built-in component takes (the recipe's ``job_parameters``)."""

    objective: str = config_option(
        "cross_entropy",
        help="cross_entropy (SFT), importance_sampling (reported feedback), ppo (clipped "
        "importance sampling) or task_group (a task job: rollouts scored by their verifiers)",
        validator=_known_objective,
    )
    scheduling: Scheduling = config_option(
        factory=Scheduling, help="remainder (train, drop, pad) and packing_length"
    )
    learning_rate: float | None = config_option(
        None, help="this job's learning rate; the component's when unset", validator=None
    )
    distillation: DistillationParameters | None = config_option(
        None,
        help="distil from a teacher: its per-token reverse KL is the advantage "
        "(importance_sampling or ppo)",
    )
    reward_baseline: str = config_option(
        "group_mean",
        help="a reward's advantage: less its group's mean (group_mean) or as it is (none)",
        validator=_known_baseline,
    )
    clip_low: float = config_option(
        0.2, help="ppo: the ratio is clipped below at 1 - clip_low", validator=_non_negative
    )
    clip_high: float = config_option(
        0.28, help="ppo: the ratio is clipped above at 1 + clip_high", validator=_non_negative
    )

    rollout: RolloutParameters | None = config_option(
        None, help="a task job's rollouts: how many of each task, the agent and the sandbox"
    )

    def __attrs_post_init__(self) -> None:
        if (self.objective == "task_group") != (self.rollout is not None):
            raise ValueError(
                "a task job trains the task_group objective with its rollout parameter: set "
                "both, or neither"
            )
        if self.distillation is not None and self.objective not in POLICY_OBJECTIVES:
            raise ValueError(
                "distillation trains a per-token advantage: set objective to "
                f"{' or '.join(POLICY_OBJECTIVES)}, not {self.objective}"
            )

    def refuse_unsupported(self, component: type[Any], objectives: Sequence[str]) -> None:
        """Refuse parameters a component cannot train: an objective not in ``objectives``, or
        distillation (only the ``local`` component scores with a teacher).

        :raises PluginConfigError: naming the parameter and what the component takes.
        """
        if self.objective not in objectives:
            raise PluginConfigError(
                component.__name__,
                "$.parameters.objective",
                f"{self.objective} is not trained here; this component trains "
                f"{', '.join(objectives)}",
            )
        if self.distillation is not None:
            raise PluginConfigError(
                component.__name__,
                "$.parameters.distillation",
                "this component does not score with a teacher; the local component does",
            )
