"""A small GPT in pure PyTorch: the causal language model of Reef's demos and tests.

It is built from a :class:`TinyGPTConfig` (a few layers, a few thousand parameters), so the
whole loop of recording, training and serving runs on a laptop's CPU in minutes, with no model
download. Pre-norm transformer blocks, learned positions, tied input and output embeddings.

:class:`TinyGPTModel` is the model with its byte tokenizer, as the local component trains it and
the local engine serves it (a :class:`reef.components.local.causal_lm.CausalLM`). Its model folder
holds ``config.json`` (``{"format": "reef-tiny-gpt", "model": <TinyGPTConfig>}``), ``model.pt``
(the ``state_dict``) and the tokenizer (``tokenizer.json``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import attrs
import torch
import torch.nn.functional as F
from torch import nn

from reef.components.local.byte_tokenizer import SPECIAL_TOKENS, ByteTokenizer
from reef.components.local.causal_lm import (
    Generation,
    ModelFolderError,
    SamplingRequest,
    ending,
    tensors_digest,
    top_entries,
    torch_generator,
)

#: The ``format`` of a TinyGPT folder's ``config.json``.
FORMAT: Final = "reef-tiny-gpt"
_CONFIG: Final = "config.json"
_WEIGHTS: Final = "model.pt"


@attrs.frozen
class TinyGPTConfig:
    """The shape of a :class:`TinyGPT`.

    :ivar vocab_size: token ids are below it (the tokenizer's ``vocab_size``).
    :ivar max_seq_len: the longest sequence the model reads (its context length).
    :ivar d_model: the width of the residual stream.
    :ivar n_layers: transformer blocks.
    :ivar n_heads: attention heads per block; ``d_model`` must divide by it.
    """

    vocab_size: int
    max_seq_len: int = 512
    d_model: int = 64
    n_layers: int = 2
    n_heads: int = 4

    def __attrs_post_init__(self) -> None:
        for name in ("vocab_size", "max_seq_len", "d_model", "n_layers", "n_heads"):
            if getattr(self, name) <= 0:
                raise ValueError(f"TinyGPTConfig.{name} must be positive")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"TinyGPTConfig.d_model ({self.d_model}) must divide by n_heads ({self.n_heads})"
            )


class _Block(nn.Module):
    def __init__(self, config: TinyGPTConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.norm1 = nn.LayerNorm(config.d_model)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.norm2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, 4 * config.d_model),
            nn.GELU(),
            nn.Linear(4 * config.d_model, config.d_model),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        heads = (batch, length, self.n_heads, width // self.n_heads)
        q, k, v = (t.view(heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, length, width))
        out: torch.Tensor = x + self.mlp(self.norm2(x))
        return out


class TinyGPT(nn.Module):
    """A causal language model: ``model(ids)`` gives next-token logits at each position."""

    def __init__(self, config: TinyGPTConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.position = nn.Embedding(config.max_seq_len, config.d_model)
        self.blocks = nn.ModuleList(_Block(config) for _ in range(config.n_layers))
        self.norm = nn.LayerNorm(config.d_model)
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits of shape ``(batch, length, vocab_size)`` for ``ids`` of ``(batch, length)``.

        Right padding is safe: attention is causal, so no real token reads a pad after it.
        """
        length = ids.shape[1]
        if length > self.config.max_seq_len:
            raise ValueError(
                f"a sequence of {length} tokens exceeds max_seq_len {self.config.max_seq_len}"
            )
        positions = torch.arange(length, device=ids.device)
        x = self.embed(ids) + self.position(positions)
        for block in self.blocks:
            x = block(x)
        return torch.matmul(self.norm(x), self.embed.weight.T)


class TinyGPTModel:
    """A :class:`TinyGPT` with its :class:`ByteTokenizer`; a
    :class:`reef.components.local.causal_lm.CausalLM`."""

    def __init__(self, model: TinyGPT, tokenizer: ByteTokenizer) -> None:
        self.model = model
        self._tokenizer = tokenizer

    @property
    def module(self) -> nn.Module:
        """The :class:`TinyGPT`."""
        return self.model

    @property
    def tokenizer(self) -> ByteTokenizer:
        """The byte tokenizer."""
        return self._tokenizer

    @property
    def max_seq_len(self) -> int:
        """The configuration's ``max_seq_len``."""
        return self.model.config.max_seq_len

    def logits(self, ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Next-token logits; right padding needs no mask (attention is causal)."""
        del attention_mask
        out: torch.Tensor = self.model(ids)
        return out

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Every parameter."""
        return list(self.model.parameters())

    def _header(self) -> dict[str, object]:
        return {"format": FORMAT, "model": attrs.asdict(self.model.config)}

    def digest(self) -> str:
        """The content hash of the configuration and the ``state_dict``."""
        return tensors_digest(self._header(), self.model.state_dict())

    def save(self, folder: Path) -> None:
        """Write ``config.json``, ``model.pt`` and ``tokenizer.json`` into ``folder``."""
        (folder / _CONFIG).write_text(json.dumps(self._header(), sort_keys=True), encoding="utf-8")
        torch.save(self.model.state_dict(), folder / _WEIGHTS)
        self._tokenizer.save(folder)

    @classmethod
    def is_folder(cls, config: object) -> bool:
        """Whether a folder's parsed ``config.json`` describes a TinyGPT."""
        return isinstance(config, dict) and config.get("format") == FORMAT

    @classmethod
    def load(cls, folder: Path, config: dict[str, object]) -> TinyGPTModel:
        """Load the folder whose parsed ``config.json`` is ``config`` (on the CPU).

        :raises ModelFolderError: when its files do not load.
        """
        try:
            with torch_generator():  # its random weights are replaced by the folder's
                model = TinyGPT(TinyGPTConfig(**config["model"]))  # type: ignore[arg-type]
            state = torch.load(folder / _WEIGHTS, map_location="cpu", weights_only=True)
            model.load_state_dict(state)
            tokenizer = ByteTokenizer.load(folder)
        except (OSError, TypeError, KeyError, RuntimeError, ValueError) as exc:
            raise ModelFolderError(f"{folder}: cannot load the model ({exc})") from exc
        return cls(model, tokenizer)

    @torch.no_grad()
    def generate(self, request: SamplingRequest) -> list[Generation]:
        """Sample token by token with a seeded generator (temperature, ``top_p``), only tokens
        that keep the reply valid UTF-8 (:func:`utf8_continuations`); the log probabilities
        reported are the model's own, before that restriction."""
        generator = torch.Generator(device="cpu")
        generator.manual_seed(request.seed)
        device = next(self.model.parameters()).device
        return [self._sample(request, generator, device) for _ in range(request.choices)]

    def _sample(
        self, request: SamplingRequest, generator: torch.Generator, device: torch.device
    ) -> Generation:
        ids = list(request.prompt)
        generated: list[int] = []
        logprobs: list[float] = []
        tops: list[tuple[tuple[int, float], ...]] = []
        finish: str | None = None
        while finish is None and len(generated) < request.max_new_tokens:
            logits = self.model(torch.tensor([ids], device=device))[0, -1].float().cpu()
            row = torch.log_softmax(logits, dim=-1)
            allowed = utf8_continuations(generated, request.max_new_tokens - len(generated))
            token = sample_token(
                logits.masked_fill(~allowed, float("-inf")),
                request.temperature,
                request.top_p,
                generator,
            )
            generated.append(token)
            ids.append(token)
            logprobs.append(float(row[token]))
            tops.append(top_entries(row, request.top_logprobs))
            finish = ending(self._tokenizer, generated, request.stops)
        return Generation(tuple(generated), tuple(logprobs), tuple(tops), finish or "length")


#: The bytes that may follow the lead byte of a multi-byte UTF-8 character, where they are
#: narrower than ``0x80``-``0xBF`` (no overlong forms, no surrogates, nothing past U+10FFFF).
_SECOND_BYTE: Final = {
    0xE0: (0xA0, 0xBF),
    0xED: (0x80, 0x9F),
    0xF0: (0x90, 0xBF),
    0xF4: (0x80, 0x8F),
}


def _continuation_bytes(token: int) -> int:
    """How many continuation bytes follow ``token`` as the lead byte of a UTF-8 character."""
    if token < 0xC2 or token > 0xF4:  # ASCII, a stray byte or a special token
        return 0
    return 1 if token < 0xE0 else 2 if token < 0xF0 else 3


def utf8_continuations(generated: Sequence[int], remaining: int) -> torch.Tensor:
    """Which tokens of the byte tokenizer may come next after ``generated`` so that the reply
    stays valid UTF-8 text, with ``remaining`` tokens left to sample (this one included).

    A reply is recorded and trained as its text, which the trainer encodes again: a byte the
    text cannot hold (a stray continuation byte, a character cut short) would decode to U+FFFD,
    whose own bytes would then train in place of the sampled ones. So inside a character only
    its valid continuation bytes may come; between characters any ASCII byte, any special
    token, or the lead byte of a character that fits in the tokens left.
    """
    vocab = 256 + len(SPECIAL_TOKENS)
    allowed = torch.zeros(vocab, dtype=torch.bool)
    lead, needed, seen = 0, 0, 0
    for token in generated:
        if needed and 0x80 <= token <= 0xBF:
            needed, seen = needed - 1, seen + 1
        else:
            lead, seen = token, 0
            needed = _continuation_bytes(token)
    if needed:
        low, high = _SECOND_BYTE.get(lead, (0x80, 0xBF)) if seen == 0 else (0x80, 0xBF)
        allowed[low : high + 1] = True
        return allowed
    allowed[:0x80] = True
    allowed[256:] = True
    if remaining >= 2:
        allowed[0xC2:0xE0] = True
    if remaining >= 3:
        allowed[0xE0:0xF0] = True
    if remaining >= 4:
        allowed[0xF0:0xF5] = True
    return allowed


def sample_token(
    logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator
) -> int:
    """One token from ``logits`` (a vector): greedy at temperature 0, else sampled from the
    smallest set of most likely tokens whose probability reaches ``top_p``."""
    if temperature == 0:
        return int(torch.argmax(logits).item())
    probs = torch.softmax(logits / temperature, dim=-1)
    if top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        keep = torch.cumsum(ordered, dim=0) - ordered < top_p
        keep[0] = True
        probs = torch.zeros_like(probs).scatter(0, order[keep], ordered[keep])
    return int(torch.multinomial(probs, 1, generator=generator).item())
