"""The causal language models of the local component and the local engine, behind one interface.

The local component trains, and the local engine serves, either a :class:`TinyGPT` with the
byte tokenizer (:mod:`reef.components.local.tiny_gpt`) or a Hugging Face causal LM, whole or with a
LoRA adapter (:mod:`reef.components.local.hf`). Both are a :class:`CausalLM`: a torch module with
its tokenizer, which gives next-token logits, saves itself as a model folder, names its weights
by a content hash and samples completions.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import attrs
import torch
from torch import nn

from reef.core.chat_rendering import Tokenizer
from reef.errors import ReefError


class ModelFolderError(ReefError, ValueError):
    """A folder does not hold a model Reef can load; the message names the folder and why."""


@attrs.frozen
class Generation:
    """One sampled completion.

    :ivar token_ids: the generated tokens, the stop token included when one ended it.
    :ivar logprobs: the model's own log probability of each generated token (before
        temperature and ``top_p``), as vLLM reports them.
    :ivar top_logprobs: for each generated token, the most likely ``(token id, log
        probability)`` pairs at that position, most likely first (empty unless asked for).
    :ivar finish: ``stop`` (a stop token), ``stop_string`` (a stop string appeared in the
        text) or ``length`` (the token limit).
    """

    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    top_logprobs: tuple[tuple[tuple[int, float], ...], ...]
    finish: str


@attrs.frozen
class SamplingRequest:
    """What to sample: the prompt and the OpenAI sampling parameters, already checked.

    :ivar temperature: 0 is greedy.
    :ivar seed: the same seed and request give the same completions.
    """

    prompt: tuple[int, ...]
    choices: int
    temperature: float
    top_p: float
    max_new_tokens: int
    stops: tuple[str, ...]
    seed: int
    top_logprobs: int


class CausalLM(Protocol):
    """A causal language model with its tokenizer, as Reef trains and serves it."""

    @property
    def module(self) -> nn.Module:
        """The torch module (``train()``, ``eval()``, ``to()``)."""
        ...

    @property
    def tokenizer(self) -> Tokenizer:
        """The tokenizer, with the chat template the model is served with."""
        ...

    @property
    def max_seq_len(self) -> int:
        """The longest token sequence the model reads (its context length)."""
        ...

    def logits(self, ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Next-token logits ``(batch, length, vocabulary)`` for right-padded ``ids``
        ``(batch, length)``; ``attention_mask`` is 1 on real tokens, 0 on padding (``None``
        for a batch without padding)."""
        ...

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The parameters an optimizer steps (a LoRA model's adapter only)."""
        ...

    def digest(self) -> str:
        """The content hash of the weights this model saves: its artifact id."""
        ...

    def save(self, folder: Path) -> None:
        """Write the model folder's files into the empty ``folder``."""
        ...

    def generate(self, request: SamplingRequest) -> list[Generation]:
        """Sample ``request.choices`` completions of ``request.prompt``."""
        ...


#: Held while a thread draws from torch's global generator, which every thread shares.
_GLOBAL_GENERATOR = threading.RLock()


@contextmanager
def torch_generator(seed: int | None = None) -> Iterator[None]:
    """Draw from torch's global generator alone, from ``seed`` when given (and give it back as
    it was then). Building a module draws from it (also one about to take loaded weights), and
    so does an HF model's sampling: the trainers of a scenario build their components on their
    own threads at once, and one thread's draws landing inside another's seeded initialisation
    would make that trainer start from other weights than its seed gives."""
    with _GLOBAL_GENERATOR:
        if seed is None:
            yield
            return
        state = torch.random.get_rng_state()
        try:
            torch.manual_seed(seed)
            yield
        finally:
            torch.random.set_rng_state(state)


def tensors_digest(header: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> str:
    """``sha256:`` and the digest of ``header`` (canonical JSON) and of each tensor's name,
    dtype, shape and bytes, in name order: the same weights give the same id in every process.
    """
    digest = hashlib.sha256(json.dumps(header, sort_keys=True).encode())
    for name, tensor in sorted(tensors.items()):
        data = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}|".encode())
        # The tensor's own bytes, without a copy (a view as bytes works for every dtype,
        # bfloat16 included, which numpy cannot hold as such).
        digest.update(data.reshape(-1).view(torch.uint8).numpy().data)
    return f"sha256:{digest.hexdigest()}"


def ending(tokenizer: Tokenizer, generated: Sequence[int], stops: Sequence[str]) -> str | None:
    """Whether ``generated`` ends with its last token: ``stop`` (a stop token),
    ``stop_string`` (its text now holds one of the ``stops`` strings), else ``None``."""
    if generated[-1] in tokenizer.stop_token_ids:
        return "stop"
    if stops and any(s in tokenizer.decode(generated) for s in stops):
        return "stop_string"
    return None


def top_entries(row: torch.Tensor, count: int) -> tuple[tuple[int, float], ...]:
    """The ``count`` most likely ``(token id, log probability)`` of a log-probability row."""
    if not count:
        return ()
    best = torch.topk(row, count)
    return tuple((int(i), float(v)) for v, i in zip(best.values, best.indices, strict=True))
