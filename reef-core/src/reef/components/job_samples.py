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
- :func:`moves_no_weight` tells a step of a policy objective that has no signal (every
  advantage 0), which every component that runs its own steps counts without an optimizer step.
- :func:`job_metrics` names a finished job's metrics, so every component reports the same keys
  (under a distilling objective, with ``teacher_kl`` and :func:`samples_without_teacher`),
  among them what the engine's tokens said of the samples: ``retokenized_samples`` (a reply
  rendered from its text, the engine having given no token ids), ``prompt_mismatch_samples``
  (the rendered prompt differs from the engine's, whose tokens trained),
  ``truncated_samples`` (a reply cut at its token limit) and ``untempered_samples`` (trained at
  temperature 1 though sampled at another, where a component cannot score at the sampling
  temperature).

The job parameters these read are in :mod:`reef.components.job_parameters`. Nothing here
needs PyTorch; rendering needs jinja2 (the ``render`` extra).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from reef.components.advantages import AdvantageSettings, group_advantages
from reef.components.job_parameters import POLICY_OBJECTIVES, DistillationParameters
from reef.components.scheduling import StepPlan
from reef.core.chat_rendering import ChatRenderer, RenderedSample, RenderError, render_samples
from reef.core.job_data import JobData, TrajectorySample, sample_reward
from reef.core.records import JSON
from reef.core.teacher_rendering import render_teacher, sample_teacher


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
    :ivar distilling: prepared for a distilling objective (its metrics name the teacher's).
    """

    objective: str
    samples: tuple[TrajectorySample, ...]
    rendered: tuple[tuple[int, RenderedSample], ...]
    advantages: Mapping[int, float]
    unrenderable_samples: int
    samples_without_reward: int
    teachers: Mapping[int, RenderedSample] = attrs.field(factory=dict)
    distilling: bool = False

    def reward_of(self, position: int) -> float | None:
        """The reward the sample at ``position`` of :attr:`rendered` trains with (``None``
        under an objective that uses none)."""
        index = self.rendered[position][0]
        return sample_reward(self.samples[index]) if index in self.advantages else None

    def advantage_of(self, position: int) -> float:
        """The advantage of the sample at ``position`` of :attr:`rendered` (0 without one)."""
        return self.advantages.get(self.rendered[position][0], 0.0)

    def trained_temperatures(self) -> frozenset[float]:
        """The temperatures the trained tokens of a policy objective's samples were sampled at
        (none under ``cross_entropy``, whose likelihood has no sampling temperature)."""
        if self.objective not in POLICY_OBJECTIVES:
            return frozenset()
        return frozenset(t for _, sample in self.rendered for t in _trained_temperatures(sample))

    def untempered_samples(self) -> int:
        """The samples of a policy objective with a trained token sampled at a temperature
        other than 1: what a component whose log probabilities are at 1 trains off the policy
        that sampled them."""
        if self.objective not in POLICY_OBJECTIVES:
            return 0
        return sum(1 for _, sample in self.rendered if _trained_temperatures(sample) - {1.0})

    def counted(self, what: str) -> int:
        """The training samples with at least one reply of ``what``: ``retokenized_replies``,
        ``prompt_mismatches`` or ``truncated_replies`` (:class:`RenderedSample`)."""
        return sum(1 for _, sample in self.rendered if getattr(sample, what) > 0)

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
    mask_truncated: bool = False,
) -> PreparedJob:
    """Render and score a job's samples (see the module's documentation).

    :param max_seq_len: the longest sequence the model reads; a sample with a longer one (or a
        longer teacher sequence) is left out (``None``: no limit beyond each sample's
        ``extra.reef.max_tokens`` and its teacher request's ``max_tokens``).
    :param component: the component's name, for the error below.
    :param distillation: a distilling objective's parameters: each sample's teacher sequence is
        rendered, and the reward trains only with a ``reward_coef`` other than 0.
    :param reward_baseline: ``group_mean`` or ``none`` (:func:`group_advantages`).
    :param mask_truncated: a sample with a reply cut at its token limit trains no token (its
        loss mask all 0), after its reward counted in its group's advantages.
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
    if mask_truncated:
        rendered = [(i, _masked(s) if s.truncated_replies else s) for i, s in rendered]
    return PreparedJob(
        objective,
        samples,
        tuple(rendered),
        advantages,
        unrenderable,
        samples_without_reward,
        {i: teachers[i] for i, _ in rendered if i in teachers},
        distillation is not None,
    )


def _masked(sample: RenderedSample) -> RenderedSample:
    """``sample`` with no token to train (DAPO's overlong filtering of a truncated sample)."""
    sequences = tuple(attrs.evolve(s, loss_mask=(0,) * len(s.loss_mask)) for s in sample.sequences)
    return attrs.evolve(sample, sequences=sequences)


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


def _trained_temperatures(sample: RenderedSample) -> set[float]:
    found: set[float] = set()
    for sequence in sample.sequences:
        temperatures = sequence.temperatures or (1.0,) * len(sequence.token_ids)
        marked = zip(temperatures, sequence.loss_mask, strict=True)
        found.update(t for t, trained in marked if trained)
    return found


def moves_no_weight(advantages: Iterable[float | Sequence[float]]) -> bool:
    """Whether a step of a policy objective whose sequences train with ``advantages`` (one per
    sequence, or one per token under a distilling objective) has no signal, so that it must move
    no weight: every advantage is 0 (a group whose answers all scored the same), its loss is 0
    whatever the weights and it has no gradient. An Adam step would still move every weight by
    the momentum of earlier steps, each by about the learning rate: after a run of such steps,
    one answer that differs from its group sets off many such moves and can undo what was
    learnt. Such a step counts (its loss 0, its samples consumed) and takes no optimizer step."""
    return not any(
        value != 0
        for advantage in advantages
        for value in ([advantage] if isinstance(advantage, (int, float)) else advantage)
    )


def samples_without_teacher(job: PreparedJob) -> int:
    """The job's training samples whose teacher request has no ``messages`` (or that have
    none): scored in the student's own prompt, so under the self teacher their KL is 0 and they
    train only their reward (the job metric of that name)."""
    return sum(
        1
        for i, _ in job.rendered
        if (teacher := sample_teacher(job.samples[i].trajectory)) is None
        or teacher.get("messages") is None
    )


def job_metrics(
    job: PreparedJob,
    plan: StepPlan,
    *,
    losses: Sequence[float],
    trained_tokens: int,
    step_tokens: Sequence[Mapping[int, int]],
    optimizer_steps: int | None,
    teacher_kl: float | None = None,
    tempered: bool = True,
) -> JSON:
    """The metrics of a finished job, under the names every component reports.

    :param step_tokens: each step's loss tokens by position in ``job.rendered``, in step order
        (the ``consumed`` lines, :func:`consumed_lines`).
    :param optimizer_steps: the steps that moved the weights (the others had no signal,
        :func:`moves_no_weight`); 0 says the job trained nothing and its weights are its start
        weights. ``None`` where the component cannot know (slime steps on its own).
    :param teacher_kl: a distilling job's mean KL to its teacher at the start weights.
    :param tempered: whether the component scores each token at its sampling temperature;
        where it does not, ``untempered_samples`` counts the samples it trained off-policy.
    """
    rewards = [r for i, _ in job.rendered if (r := sample_reward(job.samples[i])) is not None]
    metrics: JSON = {
        "loss": sum(losses) / len(losses) if losses else None,
        "step_losses": list(losses),
        "steps": len(losses),
        "optimizer_steps": optimizer_steps,
        "samples": len(job.rendered) - plan.dropped_samples,
        "unrenderable_samples": job.unrenderable_samples,
        "samples_without_reward": job.samples_without_reward,
        "dropped_samples": plan.dropped_samples,
        "retokenized_samples": job.counted("retokenized_replies"),
        "prompt_mismatch_samples": job.counted("prompt_mismatches"),
        "truncated_samples": job.counted("truncated_replies"),
        "untempered_samples": 0 if tempered else job.untempered_samples(),
        "tokens": sum(s.num_tokens for _, s in job.rendered),
        "trained_tokens": trained_tokens,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
        "objective": job.objective,
        "consumed": [
            line
            for number, tokens in enumerate(step_tokens)
            for line in consumed_lines(number, tokens, job)
        ],
    }
    if job.distilling:
        metrics["teacher_kl"] = teacher_kl
        metrics["samples_without_teacher"] = samples_without_teacher(job)
    return metrics
