"""A rendered sequence as the Tinker SDK's ``Datum``, for each objective.

Tinker's conventions, and how Reef's objectives map onto its built-in losses:

- The model reads ``model_input`` (the sequence less its last token) and position ``i`` predicts
  ``target_tokens[i]``, the sequence's token ``i + 1``. A per-token input therefore takes the
  rendered sequence's values from position 1 on: the loss mask ``loss_mask[1:]``.
- ``cross_entropy`` is ``-sum(logprob * weights)`` over every token of every datum of the
  ``forward_backward`` call: a *sum*. The local component's loss is a *mean*: the step's summed
  token loss divided by its trained tokens (times ``batch_size / units`` for a padded step, see
  :meth:`reef.components.scheduling.PlannedStep.loss_divisor`). So the weights are the loss
  mask divided by that divisor: Tinker's sum is then exactly the local component's mean, with
  the same gradient, and the ``loss:sum`` Tinker reports is the step's mean token loss.
- ``importance_sampling`` is ``-sum(exp(logprob - logprobs) * advantages)``, where
  ``logprobs`` are the tokens' log probabilities under the job's start weights (the "sampler"
  of Tinker's docs: P-REND-3 makes them the job's start weights, which Reef reads with one
  ``forward`` before the first step) and ``advantages`` the sample's advantage on each trained
  token (or, under a distilling objective, each token's own), 0 elsewhere, divided by the same
  divisor. The loss then means what the local component's ``importance_sampling`` means.
- ``ppo`` takes the same inputs and is ``-sum(min(r * advantages, clip(r, low, high) *
  advantages))`` with ``r = exp(logprob - logprobs)`` and the thresholds of its
  ``loss_fn_config`` (``clip_low_threshold``, ``clip_high_threshold``: the ratio's bounds
  themselves, ``1 - clip_low`` and ``1 + clip_high``). Dividing the advantages by a positive
  divisor divides each token's minimum by it, so it too is the local component's mean.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from tinker import types

from reef.core.chat_rendering import RenderedSequence


def _inputs(sequence: RenderedSequence) -> tuple[types.ModelInput, np.ndarray, np.ndarray]:
    tokens = sequence.token_ids
    if len(tokens) < 2:
        raise ValueError("a sequence needs at least two tokens to predict one")
    model_input = types.ModelInput.from_ints(list(tokens[:-1]))
    targets = np.asarray(tokens[1:], dtype=np.int64)
    mask = np.asarray(sequence.loss_mask[1:], dtype=np.float32)
    return model_input, targets, mask


def cross_entropy_datum(sequence: RenderedSequence, divisor: float) -> types.Datum:
    """The ``cross_entropy`` datum of ``sequence``: its trained tokens weigh ``1 / divisor``."""
    model_input, targets, mask = _inputs(sequence)
    return types.Datum(
        model_input=model_input,
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(targets),
            "weights": types.TensorData.from_numpy(mask / np.float32(divisor)),
        },
    )


def policy_datum(
    sequence: RenderedSequence,
    start_logprobs: Sequence[float],
    advantage: float | Sequence[float],
    divisor: float,
) -> types.Datum:
    """The ``importance_sampling`` (or ``ppo``) datum of ``sequence``.

    :param start_logprobs: each target token's log probability under the job's start weights
        (one per token after the first).
    :param advantage: the sample's advantage, given to each of its trained tokens; or one per
        target token (a distilling objective's), of which the trained tokens' count.
    """
    model_input, targets, mask = _inputs(sequence)
    if len(start_logprobs) != len(targets):
        raise ValueError(
            f"{len(start_logprobs)} start log probabilities for {len(targets)} target tokens"
        )
    values = np.asarray(advantage, dtype=np.float64)
    if values.ndim and len(values) != len(targets):
        raise ValueError(f"{len(values)} advantages for {len(targets)} target tokens")
    return types.Datum(
        model_input=model_input,
        loss_fn_inputs={
            "target_tokens": types.TensorData.from_numpy(targets),
            "logprobs": types.TensorData.from_numpy(np.asarray(start_logprobs, dtype=np.float32)),
            "advantages": types.TensorData.from_numpy(mask * (values / divisor).astype(np.float32)),
        },
    )


def target_logprobs(output: types.ForwardBackwardOutput) -> list[list[float]]:
    """Each datum's target-token log probabilities from a ``forward``'s output."""
    return [
        [float(value) for value in np.asarray(datum["logprobs"].to_numpy()).reshape(-1)]
        for datum in output.loss_fn_outputs
    ]
