"""The losses the local component trains with, and the batches they read.

- ``cross_entropy`` (SFT): the negative log likelihood of each trained token.
- ``importance_sampling`` (reported feedback): ``-(p / q) * A`` for each trained token, where
  ``p`` is the token's probability under the weights being trained, ``q`` under the job's
  start weights, and ``A`` the sample's advantage within its group: by default its reward minus
  the group's mean (GRPO-style), or the estimator the job data names
  (:func:`reef.components.advantages.group_advantages`). The
  ratio is exactly 1 at the job's first step and corrects the later steps of a multi-step job
  for the weights having moved.
- ``ppo``: the clipped form, ``-min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A)`` with
  ``r = p / q``, as OpenClaw-RL trains (``clip_low`` 0.2, ``clip_high`` 0.28).

Either policy objective takes one advantage per sample or one per token: a distilling
objective's advantage is per token (the teacher's reverse KL, :mod:`reef.components.local.teacher`).
The full-logit distillation adds a loss instead (:func:`topk_divergence`,
:func:`distillation_loss`): the divergence of the student's distribution over its top-k tokens
from the teacher's at each trained token, as lasgroup/SDPO trains it.

The policy's log probability of a token is that of the distribution it was sampled from: the
logits divided by the token's sampling temperature (the request's, kept by the rendering), as
slime, TRL and verl divide them by the rollout temperature; here per token, so samples of
different temperatures train together. A teacher's log probabilities are at temperature 1.

Each loss is a sum over trained tokens, each term weighted (:func:`sequence_weights`): by
default ``1 /`` the step's token count (the step's token mean), or as the job parameter
``loss_aggregation`` asks (a mean over sequences or samples of each one's token mean, or Dr.
GRPO's token sum over a constant).
Sequences of different lengths train together as one right-padded batch
(:func:`token_batch`): padding is masked out of attention and out of the loss.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import attrs
import torch
import torch.nn.functional as F

from reef.components.local.causal_lm import CausalLM
from reef.components.scheduling import SequenceRef


@attrs.frozen
class TokenBatch:
    """Sequences as one right-padded batch.

    :ivar ids: ``(batch, longest)`` token ids, 0 after each sequence's end.
    :ivar attention_mask: 1 on real tokens, 0 on padding; ``None`` when no row is padded.
    :ivar loss_mask: ``(batch, longest - 1)``: for each next-token position, 1 where that
        token trains, 0 for context and padding.
    :ivar temperatures: ``(batch, longest)``: the temperature the logits at each position are
        divided by (that of the next token, 1 at the last position and on padding); ``None``
        when every one is 1.
    """

    ids: torch.Tensor
    attention_mask: torch.Tensor | None
    loss_mask: torch.Tensor
    temperatures: torch.Tensor | None = None


def token_batch(
    sequences: Sequence[Sequence[int]],
    loss_masks: Sequence[Sequence[int]] | None,
    device: torch.device,
    temperatures: Sequence[Sequence[float] | None] | None = None,
) -> TokenBatch:
    """Pad ``sequences`` (and their loss masks, one value per token; all 0 when ``None``; and
    their tokens' sampling temperatures, one per token, ``None`` for all 1) on the right into
    a :class:`TokenBatch` on ``device``."""
    longest = max(len(s) for s in sequences)
    ids = [[*s, *([0] * (longest - len(s)))] for s in sequences]
    masks = [
        [*m[1:], *([0] * (longest - len(m)))]
        for m in (loss_masks if loss_masks is not None else [[0] * len(s) for s in sequences])
    ]
    padded = any(len(s) != longest for s in sequences)
    attention = (
        torch.tensor([[1] * len(s) + [0] * (longest - len(s)) for s in sequences], device=device)
        if padded
        else None
    )
    scaled = None
    if temperatures is not None and any(t is not None for t in temperatures):
        # The logits at position i predict token i + 1: they take that token's temperature.
        rows = [
            [*(t[1:] if t is not None else [1.0] * (len(s) - 1)), *([1.0] * (longest - len(s) + 1))]
            for s, t in zip(sequences, temperatures, strict=True)
        ]
        scaled = torch.tensor(rows, dtype=torch.float32, device=device)
    return TokenBatch(
        torch.tensor(ids, dtype=torch.long, device=device),
        attention,
        torch.tensor(masks, dtype=torch.float32, device=device),
        scaled,
    )


def _scaled_logits(model: CausalLM, batch: TokenBatch) -> torch.Tensor:
    """``(batch, longest, vocabulary)``: the model's logits at every position, in float32,
    divided by the sampling temperature of the token each position predicts."""
    logits = model.logits(batch.ids, batch.attention_mask).float()
    if batch.temperatures is not None:
        logits = logits / batch.temperatures[:, :, None]
    return logits


def batch_logprobs(model: CausalLM, batch: TokenBatch) -> torch.Tensor:
    """``(batch, longest - 1)``: the log probability of each next token given the tokens
    before it, at its sampling temperature (values at padded positions are meaningless; the
    loss mask drops them)."""
    logits = _scaled_logits(model, batch)
    rows, length, vocabulary = logits.shape
    # The targets shifted onto the logits' positions, so the logits need no sliced copy.
    targets = torch.zeros_like(batch.ids)
    targets[:, :-1] = batch.ids[:, 1:]
    nll = F.cross_entropy(
        logits.reshape(rows * length, vocabulary), targets.reshape(-1), reduction="none"
    )
    return -nll.view(rows, length)[:, :-1]


def next_token_log_softmax(model: CausalLM, batch: TokenBatch) -> torch.Tensor:
    """``(batch, longest - 1, vocabulary)``: the log distribution of each next token given the
    tokens before it, at its sampling temperature (what :func:`batch_logprobs` gathers from;
    the full-logit distillation reads it whole)."""
    return _scaled_logits(model, batch)[:, :-1].log_softmax(-1)


def next_token_logprobs(log_softmax: torch.Tensor, batch: TokenBatch) -> torch.Tensor:
    """The log probability of each next token (``(batch, longest - 1)``), read from
    :func:`next_token_log_softmax`."""
    return log_softmax.gather(-1, batch.ids[:, 1:, None])[..., 0]


def topk_divergence(
    student: torch.Tensor, teacher: torch.Tensor, *, add_tail: bool, alpha: float
) -> torch.Tensor:
    """The generalised Jensen-Shannon divergence of the student's from the teacher's
    distribution over the same ``k`` tokens at each position, as lasgroup/SDPO's
    ``compute_self_distillation_loss`` takes it (``verl/trainer/ppo/core_algos.py``).

    :param student: ``(..., k)`` the student's log probabilities of the tokens.
    :param teacher: ``(..., k)`` the teacher's, of the same tokens.
    :param add_tail: add the mass outside the ``k`` tokens, ``log(1 - sum p)``, as one more
        outcome (the sum clamped just under 1); else renormalise over the ``k``.
    :param alpha: ``(1 - alpha) * KL(S || M) + alpha * KL(T || M)``, ``M = (1 - alpha) * S +
        alpha * T``; 0 is ``KL(T || S)``, 1 is ``KL(S || T)``.
    :returns: ``(...)``, one divergence per position.
    """

    def support(values: torch.Tensor) -> torch.Tensor:
        total = torch.logsumexp(values, dim=-1, keepdim=True)
        if not add_tail:
            return values - total
        tail = torch.log(-torch.expm1(torch.clamp(total, max=-1e-7)))
        return torch.cat([values, tail], dim=-1)

    s, t = support(student), support(teacher)

    def kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:  # KL(P || Q) from logs
        return (p.exp() * (p - q)).sum(-1)

    if alpha == 0.0:
        return kl(t, s)
    if alpha == 1.0:
        return kl(s, t)
    # log M = log((1 - alpha) e^s + alpha e^t), taken from the larger of the two logs so that
    # no exponent is positive, and so that M is exactly S where the teacher equals the student
    # (a sample without teacher context then has a divergence of exactly 0, as the sampled form).
    mix = torch.where(
        t <= s,
        s + torch.log1p(alpha * torch.expm1(torch.clamp(t - s, max=0.0))),
        t + torch.log1p((1.0 - alpha) * torch.expm1(torch.clamp(s - t, max=0.0))),
    )
    return (1.0 - alpha) * kl(s, mix) + alpha * kl(t, mix)


def distillation_loss(
    divergence: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    row_weights: torch.Tensor,
    logprobs: torch.Tensor,
    start_logprobs: torch.Tensor,
    is_clip: float | None,
) -> torch.Tensor:
    """The summed full-logit distillation loss of a batch: each trained token's
    ``divergence`` (``(batch, longest - 1)``) times its row's weight and, with ``is_clip``, the
    ratio ``p / q`` truncated at ``is_clip`` and not differentiated (as the authors weigh it)."""
    terms = divergence * loss_mask * row_weights[:, None]
    if is_clip is not None:
        ratio = torch.exp(((logprobs - start_logprobs) * loss_mask).detach())
        terms = terms * torch.clamp(ratio, max=is_clip)
    return terms.sum()


def token_logprobs(
    model: CausalLM,
    sequences: Sequence[Sequence[int]],
    device: torch.device,
    temperatures: Sequence[Sequence[float] | None] | None = None,
) -> list[torch.Tensor]:
    """For each sequence, the log probability of each token after the first given the tokens
    before it (length ``len(sequence) - 1``; at each token's temperature when given), in one
    padded forward pass."""
    values = batch_logprobs(model, token_batch(sequences, None, device, temperatures))
    return [values[row, : len(s) - 1] for row, s in enumerate(sequences)]


def sequence_weights(
    aggregation: str,
    refs: Sequence[SequenceRef],
    tokens: Callable[[SequenceRef], int],
    *,
    divisor: float,
    norm_tokens: int | None = None,
) -> Mapping[SequenceRef, float]:
    """The weight of each token term of each sequence of a step (its loss is the weighted sum).

    :param aggregation: ``token_mean`` (``1 / divisor``: the step's token count, as
        :meth:`~reef.components.scheduling.PlannedStep.loss_divisor` gives it; verl's
        ``token-mean``, TRL's ``bnpo`` and ``dapo``), ``sequence_mean`` (each sequence's token
        mean, averaged over the step's sequences: verl's ``seq-mean-token-mean``, TRL's
        ``grpo``), ``sample_mean`` (each sample's token mean over all its sequences, averaged
        over the step's samples: slime's default, without ``--calculate-per-token-loss``) or
        ``token_sum_norm`` (each sequence's token sum over ``norm_tokens``, averaged over the
        sequences: Dr. GRPO, verl's ``seq-mean-token-sum-norm``, TRL's ``dr_grpo``).
    :param tokens: the trained tokens of a sequence.
    """
    counted = [ref for ref in refs if tokens(ref) > 0]
    if aggregation == "token_mean":
        return dict.fromkeys(counted, 1.0 / divisor)
    if aggregation == "sequence_mean":
        return {ref: 1.0 / (tokens(ref) * len(counted)) for ref in counted}
    if aggregation == "token_sum_norm":
        if norm_tokens is None:
            raise ValueError("token_sum_norm needs norm_tokens")
        return {ref: 1.0 / (norm_tokens * len(counted)) for ref in counted}
    if aggregation != "sample_mean":
        raise ValueError(f"unknown loss aggregation {aggregation!r}")
    per_sample: dict[int, int] = {}
    for ref in counted:
        per_sample[ref[0]] = per_sample.get(ref[0], 0) + tokens(ref)
    return {ref: 1.0 / (per_sample[ref[0]] * len(per_sample)) for ref in counted}


def batch_loss(
    objective: str,
    logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    start_logprobs: torch.Tensor | None = None,
    advantages: torch.Tensor | None = None,
    clip: tuple[float, float] = (0.2, 0.28),
    row_weights: torch.Tensor | None = None,
    is_clip: float | None = None,
) -> torch.Tensor:
    """The summed loss of a batch's trained tokens (``loss_mask`` 1) under ``objective``,
    each row's terms times its ``row_weights`` (``(batch,)``; 1 when ``None``).

    :param start_logprobs: ``importance_sampling`` and ``ppo``: the tokens' log probabilities
        under the job's start weights, the shape of ``logprobs``.
    :param advantages: ``importance_sampling`` and ``ppo``: each row's advantage,
        ``(batch,)``, or each token's, the shape of ``logprobs``.
    :param clip: ``ppo``: ``(clip_low, clip_high)``.
    :param is_clip: ``importance_sampling``: truncated importance sampling, the loss
        ``-sg(min(ratio, is_clip)) * A * log p`` (its gradient is the plain loss's while the
        ratio is under ``is_clip``, and ``is_clip``'s above).
    """
    weights = loss_mask if row_weights is None else loss_mask * row_weights[:, None]
    if objective == "cross_entropy":
        return -(logprobs * weights).sum()
    if objective not in ("importance_sampling", "ppo"):
        raise ValueError(f"unknown objective {objective!r}")
    if start_logprobs is None or advantages is None:
        raise ValueError(f"{objective} needs the start weights' log probabilities and "
                         "each sample's advantage")  # fmt: skip
    per_token = advantages if advantages.dim() == 2 else advantages[:, None]
    # Masked positions get a ratio of exactly 1 (then weight 0): a context token whose
    # probability moved far cannot overflow into inf * 0.
    ratio = torch.exp((logprobs - start_logprobs) * loss_mask)
    if objective == "importance_sampling" and is_clip is not None:
        # lasgroup/SDPO's is_clip (compute_self_distillation_loss): the ratio weighs the
        # gradient of log p, at most is_clip, and is not itself differentiated.
        truncated = torch.clamp(ratio.detach(), max=is_clip)
        return -(truncated * per_token * logprobs * weights).sum()
    gain = ratio * per_token
    if objective == "ppo":
        low, high = clip
        gain = torch.minimum(gain, torch.clamp(ratio, 1 - low, 1 + high) * per_token)
    return -(gain * weights).sum()
