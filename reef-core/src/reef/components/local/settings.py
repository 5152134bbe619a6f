"""The settings of the ``local`` component: what a deployment's ``training`` section writes for it.

They live apart from the component so that reading and checking a deployment needs no PyTorch,
and so that the model folders (:mod:`reef.components.local.artifacts`) and the Hugging Face
models (:mod:`reef.components.local.hf`) can name :class:`LoraSettings` without importing the
component that trains them.
"""

from __future__ import annotations

from typing import Any, ClassVar

import attrs

from reef.core.config import config_option
from reef.core.plugins import PluginSettings


def _positive(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


def _fraction(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not 0 <= value < 1:
        raise ValueError(f"{attribute.name} must be in [0, 1), got {value!r}")


@attrs.frozen
class LoraSettings(PluginSettings):
    """A LoRA adapter for a Hugging Face model (peft's ``LoraConfig``): only the adapter trains,
    and each artifact is a PEFT adapter folder."""

    r: int = config_option(8, help="the adapter's rank", validator=_positive)
    alpha: int = config_option(
        16, help="lora_alpha: the update is scaled by alpha / r", validator=_positive
    )
    dropout: float = config_option(0.0, help="dropout on the adapter's input", validator=_fraction)
    target_modules: list[str] | None = config_option(
        None,
        help="names of the modules to adapt (q_proj, v_proj...); [all-linear] for every "
        "linear layer but the output; peft's default for the architecture when unset",
    )


@attrs.frozen
class LocalComponentSettings(PluginSettings):
    """The settings of the ``local`` component (the deployment's component section)."""

    #: The option that names the folder this component keeps its own state in: two trainers
    #: of a scenario may not share it (``reef check`` refuses).
    state_options: ClassVar[tuple[str, ...]] = ("state_dir",)

    state_dir: str = config_option(
        help="folder of the component's weights, optimizer state, job outcomes and artifacts"
    )
    model_path: str | None = config_option(
        None,
        help="model folder to start from: a Hugging Face causal LM folder (reef-core[hf]) or "
        "one this component saved; without it a TinyGPT is built from d_model...",
    )
    lora: LoraSettings | None = config_option(
        None, help="train a LoRA adapter of the model_path model (r, alpha, dropout, ...)"
    )
    d_model: int = config_option(64, help="TinyGPT width", validator=_positive)
    n_layers: int = config_option(2, help="TinyGPT blocks", validator=_positive)
    n_heads: int = config_option(4, help="TinyGPT attention heads", validator=_positive)
    max_seq_len: int = config_option(512, help="TinyGPT context length", validator=_positive)
    batch_size: int = config_option(
        8, help="units (samples or packs) per optimizer step", validator=_positive
    )
    micro_batch_size: int | None = config_option(
        None,
        help="sequences per forward pass; a step's gradients accumulate over its passes "
        "(all of a step's sequences in one pass when unset)",
        validator=_positive,
    )
    learning_rate: float = config_option(1e-3, help="AdamW learning rate", validator=_positive)
    seed: int = config_option(0, help="seed of the built model's (or adapter's) initial weights")
    device: str = config_option("auto", help="torch device; auto takes CUDA when present")
    threads: int | None = config_option(
        None,
        help="CPU threads torch computes with (torch.set_num_threads, for the whole process); "
        "torch's own default when unset",
        validator=_positive,
    )
    chat_template_args: dict[str, Any] = config_option(
        factory=dict, help="the engine's chat template arguments (enable_thinking...)"
    )

    def __attrs_post_init__(self) -> None:
        if self.lora is not None and self.model_path is None:
            raise ValueError("lora trains an adapter of a Hugging Face model: set model_path")
