"""The losses the local component trains with, and the advantages they read.

- ``cross_entropy`` (SFT): the negative log likelihood of each trained token.
- ``importance_sampling`` (reported feedback): ``-(p / q) * A`` for each trained token, where
  ``p`` is the token's probability under the weights being trained, ``q`` under the job's
  start weights, and ``A`` the sample's advantage: its reward minus the mean reward of its
  group (GRPO-style group centring, :func:`reef.components.job_samples.group_advantages`).
  The ratio is exactly 1 at the job's first step and corrects the later steps of a multi-step
  job for the weights having moved.

Each loss is a sum over trained tokens; the caller divides it by the step's token count.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn


def token_logprobs(
    model: nn.Module, sequences: Sequence[Sequence[int]], device: torch.device
) -> list[torch.Tensor]:
    """For each sequence, the log probability of each token after the first given the tokens
    before it (length ``len(sequence) - 1``), in one right-padded forward pass."""
    longest = max(len(s) for s in sequences)
    ids = torch.zeros((len(sequences), longest), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence)] = torch.tensor(sequence, dtype=torch.long)
    ids = ids.to(device)
    logits = model(ids)[:, :-1].float()
    chosen = torch.gather(torch.log_softmax(logits, dim=-1), 2, ids[:, 1:].unsqueeze(-1))
    return [chosen[row, : len(s) - 1, 0] for row, s in enumerate(sequences)]


def token_loss(
    objective: str,
    logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    start_logprobs: torch.Tensor | None = None,
    advantage: float = 0.0,
) -> torch.Tensor:
    """The summed loss of one sequence's trained tokens (``mask`` 1) under ``objective``.

    :param start_logprobs: the tokens' log probabilities under the job's start weights
        (``importance_sampling`` only).
    """
    if objective == "cross_entropy":
        return -(logprobs * mask).sum()
    if objective != "importance_sampling":
        raise ValueError(f"unknown objective {objective!r}")
    if start_logprobs is None:
        raise ValueError("importance_sampling needs the log probabilities of the start weights")
    ratio = torch.exp(logprobs - start_logprobs)
    return -(ratio * advantage * mask).sum()
