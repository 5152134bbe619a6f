"""SGLang's weight endpoints, as its serving code defines them.

- LoRA adapters: ``POST /load_lora_adapter {lora_name, lora_path}`` and
  ``POST /unload_lora_adapter {lora_name}``, answered ``{success, error_message,
  loaded_adapters}`` (400 when not ``success``); a call names ``<base model>:<adapter>`` as its
  ``model``, which the answer repeats.
- Full weights: ``POST /update_weights_from_disk {model_path, weight_version}``, answered
  ``{success, message, num_paused_requests}``; SGLang finishes the calls it runs before it swaps
  the weights. A whole answer names the weights that answered (``metadata.weight_version``: Reef
  sets it to the artifact id); a streamed one does not, so it is labelled only when no swap ran
  while it was answered.

A call that names an adapter SGLang does not hold (it restarted without it) is answered 400
``BadRequestError`` with the message "The following requested LoRA adapters are not loaded:
<name>" (python/sglang/srt/lora/lora_registry.py, raised as a ValueError that
python/sglang/srt/entrypoints/openai/serving_chat.py answers with a 400): no 404.
"""

from __future__ import annotations

from typing import Final, Literal

import attrs
import httpx

from reef.core.records import JSON
from reef.engines.admin import ListedAdapters, PublicationError, error_message, request

#: How SGLang's refusal of a call to an adapter it does not hold begins.
NOT_LOADED: Final = "The following requested LoRA adapters are not loaded"


def _sglang_post(client: httpx.Client, path: str, body: JSON) -> tuple[int, str | None]:
    """POST ``body`` to one of SGLang's weight endpoints, which answer ``{success, ...}``: the
    status, and the error message unless it succeeded."""
    status, parsed, text = request(client, "POST", path, body)
    if status == 200 and isinstance(parsed, dict) and parsed.get("success") is True:
        return status, None
    return status, error_message(parsed, text)


@attrs.frozen
class SglangAdapters(ListedAdapters):
    """SGLang's run-time LoRA endpoints; calls name ``<base model>:<adapter>``."""

    base_model: str
    kind: str = "sglang"
    weights: Literal["adapter", "full"] = "adapter"

    def load(self, client: httpx.Client, name: str, path: str, artifact_id: str) -> None:
        del artifact_id
        body: JSON = {"lora_name": name, "lora_path": path}
        status, error = _sglang_post(client, "/load_lora_adapter", body)
        # Another process published the same artifact: the adapter is there.
        if error is not None and "already loaded" not in error:
            raise PublicationError(f"SGLang refused adapter {name} ({path}): {status} {error}")

    def unload(self, client: httpx.Client, name: str) -> None:
        status, error = _sglang_post(client, "/unload_lora_adapter", {"lora_name": name})
        if error is not None:
            raise PublicationError(f"SGLang did not unload adapter {name}: {status} {error}")

    def model(self, name: str) -> str:
        return f"{self.base_model}:{name}"

    def lost(self, status: int, body: JSON | None) -> bool:
        return status == 400 and NOT_LOADED in error_message(body, "")


@attrs.frozen
class SglangFullWeights:
    """SGLang's ``/update_weights_from_disk``; the weight version is the artifact id."""

    base_model: str
    kind: str = "sglang"
    weights: Literal["adapter", "full"] = "full"

    def load(self, client: httpx.Client, name: str, path: str, artifact_id: str) -> None:
        del name
        body: JSON = {"model_path": path, "weight_version": artifact_id}
        status, error = _sglang_post(client, "/update_weights_from_disk", body)
        if error is not None:
            raise PublicationError(
                f"SGLang did not update its weights from {path}: {status} {error}"
            )

    def unload(self, client: httpx.Client, name: str) -> None:
        del client, name  # full weights are replaced, never unloaded

    def adapters(self, client: httpx.Client) -> list[str]:
        del client
        return []  # Reef loads no adapters beside full weights

    def model(self, name: str) -> str:
        del name
        return self.base_model

    def lost(self, status: int, body: JSON | None) -> bool:
        del status, body
        return False  # full weights are never named by a call: a restart shows in the version
