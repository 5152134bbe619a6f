"""A task job's rollouts as what a PyTorch component trains (:mod:`reef.components.task_rollouts`
holds what needs no PyTorch).

- :func:`model_sampler`: the :data:`~reef.components.task_rollouts.Sampler` of a causal LM at
  its current weights: each reply's tokens and its sampler's log probability of each;
- :class:`RolloutBatch`: the rollouts that train (groups of at least two), each as one rendered
  sequence (the prompt as context, the reply trained), the sampler's log probabilities on the
  rows of its next-token predictions, and its ``task_group`` advantage;
"""

from __future__ import annotations

import secrets

import attrs
import torch

from reef.components.local.causal_lm import CausalLM, SamplingRequest
from reef.components.task_rollouts import (
    Sampled,
    Sampler,
    TaskRollouts,
    reply_text,
    task_group_advantages,
)
from reef.core.chat_rendering import ChatRenderer, RenderedSequence
from reef.core.records import JSON

__all__ = ["RolloutBatch", "model_sampler"]


def model_sampler(model: CausalLM, renderer: ChatRenderer) -> Sampler:
    """Samples replies of ``model`` as it is now (a task job's start weights: no step ran)."""
    tokenizer = renderer.tokenizer

    def sample(request: JSON, count: int) -> tuple[tuple[int, ...], list[Sampled]]:
        prompt = tuple(renderer.prompt_ids(request))
        room = model.max_seq_len - len(prompt)
        if room <= 0:
            raise ValueError(
                f"the task's prompt is {len(prompt)} tokens; the model reads {model.max_seq_len}"
            )
        generations = model.generate(
            SamplingRequest(
                prompt=prompt,
                choices=count,
                temperature=float(request["temperature"]),
                top_p=1.0,
                max_new_tokens=min(int(request["max_tokens"]), room),
                stops=(),
                seed=secrets.randbits(63),
                top_logprobs=0,
            )
        )
        replies = []
        for generation in generations:
            text = reply_text(tokenizer, generation.token_ids)
            replies.append(Sampled(generation.token_ids, generation.logprobs, text))
        return prompt, replies

    return sample


@attrs.frozen
class RolloutBatch:
    """The rollouts of a task job that train, in rollout order.

    :ivar sequences: each one's prompt and reply; only the reply's tokens train.
    :ivar start: each one's sampler log probabilities, one row of ``len(sequence) - 1`` (the
        reply's positions; the prompt's rows are 0 and masked out).
    :ivar advantages: each one's ``task_group`` advantage.
    """

    sequences: tuple[RenderedSequence, ...]
    start: tuple[torch.Tensor, ...]
    advantages: tuple[float, ...]

    @classmethod
    def of(cls, done: TaskRollouts, device: torch.device) -> RolloutBatch:
        """The rollouts of ``done`` that train (groups of at least two)."""
        advantages = task_group_advantages(done.rollouts)
        sequences: list[RenderedSequence] = []
        start: list[torch.Tensor] = []
        for index in sorted(advantages):
            rollout = done.rollouts[index]
            sequences.append(rollout.sequence())
            start.append(torch.tensor(rollout.start_logprobs(), device=device))
        return cls(tuple(sequences), tuple(start), tuple(advantages[i] for i in sorted(advantages)))
