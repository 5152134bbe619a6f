"""The settings of the ``tinker`` component (the deployment's ``training.options``), apart from
the component so that its sampler (:mod:`reef.components.tinker.sampler`) reads them without
importing the component that starts it."""

from __future__ import annotations

from typing import Any, ClassVar, Final

import attrs

from reef.core.config import config_option
from reef.core.plugins import PluginSettings

#: The component's class name, as configuration errors name the plugin.
COMPONENT_CLASS: Final = "TinkerComponent"


def _positive(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be positive, got {value!r}")


def _non_negative(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if value < 0:
        raise ValueError(f"{attribute.name} must not be negative, got {value!r}")


@attrs.frozen
class TinkerComponentSettings(PluginSettings):
    """The settings of the ``tinker`` component (the deployment's ``training.options``)."""

    #: The option that names the folder this component keeps its own state in: two trainers
    #: of a scenario may not share it (``reef check`` refuses).
    state_options: ClassVar[tuple[str, ...]] = ("state_dir",)

    state_dir: str = config_option(
        help="folder of the component's journal: its training run, checkpoints, job outcomes"
        " and artifacts (keep it: it is how a restart knows what trained)"
    )
    base_model: str = config_option(help="the model Tinker trains a LoRA of (Qwen/Qwen3-8B...)")
    lora_rank: int = config_option(32, help="LoRA rank", validator=_positive)
    seed: int | None = config_option(0, help="seed of the LoRA's initial weights")
    batch_size: int = config_option(
        8, help="units (samples or packs) per optimizer step", validator=_positive
    )
    learning_rate: float = config_option(1e-4, help="Adam learning rate", validator=_positive)
    beta1: float = config_option(0.9, help="Adam beta1", validator=_non_negative)
    beta2: float = config_option(0.95, help="Adam beta2", validator=_non_negative)
    eps: float = config_option(1e-12, help="Adam epsilon", validator=_positive)
    weight_decay: float = config_option(0.0, help="decoupled weight decay", validator=_non_negative)
    grad_clip_norm: float = config_option(
        0.0, help="clip the global gradient norm to this (0: no clipping)", validator=_non_negative
    )
    max_seq_len: int | None = config_option(
        None, help="longest sequence that trains; longer samples are unrenderable",
        validator=_positive,
    )  # fmt: skip
    chat_template_args: dict[str, Any] = config_option(
        factory=dict, help="the engine's chat template arguments (enable_thinking...)"
    )
    tokenizer: str | None = config_option(
        None,
        help="the base model's tokenizer from Tinker when unset; else a tokenizer folder, or"
        " 'byte' for Reef's demo tokenizer",
    )
    api_key_env: str = config_option(
        "TINKER_API_KEY", help="the environment variable that holds the Tinker API key"
    )
    base_url: str | None = config_option(None, help="the Tinker API URL; the SDK's default")
    request_timeout: float = config_option(
        600.0, help="seconds to wait for any one Tinker request before the job fails",
        validator=_positive,
    )  # fmt: skip
    checkpoint_ttl_seconds: int | None = config_option(
        None, help="how long Tinker keeps each checkpoint (None: forever)", validator=_positive
    )
