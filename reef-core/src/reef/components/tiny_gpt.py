"""A small GPT in pure PyTorch: the causal language model of Reef's demos and tests.

It is built from a :class:`TinyGPTConfig` (a few layers, a few thousand parameters), so the
whole loop of recording, training and serving runs on a laptop's CPU in minutes, with no model
download. Pre-norm transformer blocks, learned positions, tied input and output embeddings.
"""

from __future__ import annotations

import attrs
import torch
import torch.nn.functional as F
from torch import nn


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
