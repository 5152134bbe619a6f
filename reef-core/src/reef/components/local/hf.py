"""Hugging Face causal LMs in the local component and the local engine (``reef-core[hf]``).

:func:`load_hf_folder` loads any causal LM folder that transformers loads
(``AutoModelForCausalLM``, ``AutoTokenizer``), whole or with a LoRA adapter made by peft, as an
:class:`HFModel` (a :class:`reef.components.local.causal_lm.CausalLM`). It saves itself in the
formats engines load:

- whole weights: a transformers model folder (``config.json``, ``generation_config.json``,
  ``model.safetensors`` and the tokenizer files with ``chat_template.jinja``), which vLLM and
  SGLang serve and SGLang's ``/update_weights_from_disk`` takes;
- with LoRA: a PEFT adapter folder (``adapter_config.json``, ``adapter_model.safetensors``),
  which vLLM's ``/v1/load_lora_adapter`` and SGLang's LoRA loading take; its
  ``base_model_name_or_path`` names the base model folder.

The artifact id is a content hash (:func:`reef.components.local.causal_lm.tensors_digest`) of the
saved tensors and of what decides how they apply: the model configuration for whole weights,
the adapter's rank, scaling and targets for LoRA (not the base's path, which differs between
machines).

The tokenizer is the model's own (:class:`reef.components.tokenizers.HFTokenizer`), with its
chat template; its stop tokens are the end-of-sequence tokens of ``generation_config.json`` and
of the tokenizer, as vLLM's are.
"""

from __future__ import annotations

import json
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model, get_peft_model_state_dict
from safetensors.torch import save_file
from torch import nn
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
)

from reef.components.local.causal_lm import (
    Generation,
    ModelFolderError,
    SamplingRequest,
    ending,
    tensors_digest,
    top_entries,
    torch_generator,
)
from reef.components.tokenizers import HFTokenizer, folder_stop_token_ids

if TYPE_CHECKING:
    from reef.components.local.settings import LoraSettings

#: The file that makes a folder a PEFT adapter folder.
ADAPTER_CONFIG: Final = "adapter_config.json"
_ADAPTER_WEIGHTS: Final = "adapter_model.safetensors"
#: Configuration keys that change with the library or the folder, never with the weights.
_VOLATILE_CONFIG: Final = frozenset(
    {"transformers_version", "_name_or_path", "dtype", "torch_dtype"}
)

# A server's log is no place for download-style progress bars of loading and saving, nor for
# a deprecation that peft (not Reef) triggers in transformers on every adapter it builds.
transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing", category=FutureWarning)


def _canonical_config(model: PreTrainedModel) -> dict[str, Any]:
    config: dict[str, Any] = json.loads(model.config.to_json_string(use_diff=False))
    return {k: v for k, v in config.items() if k not in _VOLATILE_CONFIG}


class HFModel:
    """A transformers causal LM with its tokenizer, whole or with a LoRA adapter; a
    :class:`reef.components.local.causal_lm.CausalLM`. Build it with :func:`load_hf_folder`."""

    def __init__(
        self, module: PreTrainedModel | PeftModel, tokenizer: HFTokenizer, *, base_path: Path
    ) -> None:
        self._module = module
        self._tokenizer = tokenizer
        self.base_path = base_path
        config = module.config
        context = getattr(config, "max_position_embeddings", None) or getattr(
            config, "n_positions", None
        )
        if not isinstance(context, int) or context <= 0:
            raise ModelFolderError(f"{base_path}: the model configuration gives no context length")
        self._max_seq_len = context
        self._generating = threading.Lock()

    @property
    def module(self) -> nn.Module:
        """The transformers model (a ``PeftModel`` around it with LoRA)."""
        return self._module

    @property
    def tokenizer(self) -> HFTokenizer:
        """The model's tokenizer."""
        return self._tokenizer

    @property
    def max_seq_len(self) -> int:
        """``max_position_embeddings`` (or ``n_positions``) of the model's configuration."""
        return self._max_seq_len

    def logits(self, ids: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        """Next-token logits; ``attention_mask`` is ``None`` for a batch without padding."""
        out = self._module(input_ids=ids, attention_mask=attention_mask, use_cache=False)
        logits: torch.Tensor = out.logits
        return logits

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The parameters that need gradients (the adapter's, with LoRA)."""
        return [p for p in self._module.parameters() if p.requires_grad]

    def _adapter_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        config = self._module.peft_config["default"]
        assert isinstance(config, LoraConfig)  # Reef makes and loads LoRA adapters only
        targets = config.target_modules
        header = {
            "format": "peft-lora",
            "r": config.r,
            "lora_alpha": config.lora_alpha,
            "use_rslora": config.use_rslora,
            "use_dora": config.use_dora,
            "bias": config.bias,
            "target_modules": [targets] if isinstance(targets, str) else sorted(targets or ()),
        }
        state: dict[str, torch.Tensor] = get_peft_model_state_dict(self._module)
        return header, state

    def digest(self) -> str:
        """The content hash of the adapter (LoRA) or of the whole weights and configuration."""
        if isinstance(self._module, PeftModel):
            header, state = self._adapter_state()
            return tensors_digest(header, state)
        header = {"format": "hf", "config": _canonical_config(self._module)}
        return tensors_digest(header, self._module.state_dict())

    def save(self, folder: Path) -> None:
        """Write a PEFT adapter folder (LoRA) or a transformers model folder with the
        tokenizer (whole weights) into ``folder``."""
        if isinstance(self._module, PeftModel):
            _, state = self._adapter_state()
            tensors = {name: t.detach().contiguous() for name, t in state.items()}
            save_file(tensors, str(folder / _ADAPTER_WEIGHTS), metadata={"format": "pt"})
            self._module.peft_config["default"].save_pretrained(str(folder))
            return
        self._module.save_pretrained(folder)
        self._tokenizer.hf.save_pretrained(folder)

    def generate(self, request: SamplingRequest) -> list[Generation]:
        """Sample with transformers' ``generate`` (temperature, ``top_p``; nothing else of the
        model's generation config applies, as in an OpenAI request that sets only these) and
        report the model's own log probabilities (its raw logits)."""
        device = next(self._module.parameters()).device
        stop_ids = list(self._tokenizer.stop_token_ids)
        sampling = request.temperature > 0
        config = GenerationConfig(  # type: ignore[no-untyped-call]
            do_sample=sampling,
            temperature=request.temperature if sampling else None,
            top_p=request.top_p if sampling else None,
            top_k=0 if sampling else None,
            max_new_tokens=request.max_new_tokens,
            num_return_sequences=request.choices,
            eos_token_id=stop_ids,
            pad_token_id=self._tokenizer.hf.pad_token_id
            if self._tokenizer.hf.pad_token_id is not None
            else stop_ids[0],
            stop_strings=list(request.stops) or None,
            output_logits=True,
            return_dict_in_generate=True,
        )
        ids = torch.tensor([list(request.prompt)], dtype=torch.long, device=device)
        devices = [device.index or 0] if device.type == "cuda" else []
        # generate samples from torch's global generator: seeding it is only safe one draw
        # at a time (torch_generator), and the generator is given back as it was.
        with (
            self._generating,
            torch_generator(),
            torch.no_grad(),
            torch.random.fork_rng(devices=devices),
        ):
            torch.manual_seed(request.seed)
            generate: Any = self._module.generate  # typed as a module attribute by torch
            out = generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                generation_config=config,
                tokenizer=self._tokenizer.hf,
            )
        steps = torch.stack([step.float() for step in out.logits], dim=1).log_softmax(-1).cpu()
        new_tokens = out.sequences[:, ids.shape[1] :].cpu()
        return [
            self._generation(new_tokens[row].tolist(), steps[row], request)
            for row in range(request.choices)
        ]

    def _generation(
        self, tokens: list[int], rows: torch.Tensor, request: SamplingRequest
    ) -> Generation:
        # generate pads a sequence that ended before the others: it ends where it first would.
        kept: list[int] = []
        finish: str | None = None
        for token in tokens:
            kept.append(token)
            finish = ending(self._tokenizer, kept, request.stops)
            if finish is not None:
                break
        logprobs = tuple(float(rows[i, t]) for i, t in enumerate(kept))
        tops = tuple(top_entries(rows[i], request.top_logprobs) for i in range(len(kept)))
        return Generation(tuple(kept), logprobs, tops, finish or "length")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ModelFolderError(f"{path}: not readable JSON ({exc})") from exc
    if not isinstance(body, dict):
        raise ModelFolderError(f"{path}: not a JSON object")
    return body


def _lora_config(lora: LoraSettings) -> LoraConfig:
    targets: list[str] | str | None = lora.target_modules
    if targets == ["all-linear"]:
        targets = "all-linear"  # peft's shorthand: every linear layer but the output layer
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        task_type="CAUSAL_LM",
    )


def load_hf_folder(
    folder: Path,
    *,
    base_model: Path | None = None,
    lora: LoraSettings | None = None,
    seed: int = 0,
    trainable: bool = True,
) -> HFModel:
    """Load an HF model folder, or a PEFT adapter folder on its base, on the CPU.

    :param folder: a transformers model folder, or a PEFT adapter folder.
    :param base_model: the base model folder of an adapter folder; its
        ``base_model_name_or_path`` when ``None``.
    :param lora: for a model folder, a new LoRA adapter of these settings is put on it
        (initialised from ``seed``); its whole weights train without.
    :param trainable: whether an adapter loaded from an adapter folder trains.
    :raises ModelFolderError: when the folder or its base does not load.
    """
    adapter_folder = folder if (folder / ADAPTER_CONFIG).exists() else None
    base = folder
    if adapter_folder is not None:
        named = _read_json(adapter_folder / ADAPTER_CONFIG).get("base_model_name_or_path")
        if base_model is None and not isinstance(named, str):
            raise ModelFolderError(f"{folder}: the adapter names no base model folder")
        base = base_model if base_model is not None else Path(str(named))
    # An absolute path: an adapter saved from this model names its base by it.
    base = base.resolve()
    try:
        tokenizer = AutoTokenizer.from_pretrained(base)
        with torch_generator():
            module: PreTrainedModel | PeftModel = AutoModelForCausalLM.from_pretrained(
                base, dtype=torch.float32
            )
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        reason = f"{base}: not a causal LM folder transformers loads ({exc})"
        raise ModelFolderError(reason) from exc
    try:
        hf_tokenizer = HFTokenizer(tokenizer, folder_stop_token_ids(base, tokenizer))
    except ValueError as exc:
        raise ModelFolderError(f"{base}: {exc}") from exc
    if adapter_folder is not None:
        try:
            with torch_generator():
                module = PeftModel.from_pretrained(module, adapter_folder, is_trainable=trainable)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            reason = f"{folder}: the adapter does not load on {base} ({exc})"
            raise ModelFolderError(reason) from exc
    elif lora is not None:
        try:
            with torch_generator(seed):
                module = get_peft_model(module, _lora_config(lora))
        except ValueError as exc:
            raise ModelFolderError(f"lora: {exc}") from exc
    return HFModel(module, hf_tokenizer, base_path=base)
