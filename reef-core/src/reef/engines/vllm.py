"""vLLM's run-time LoRA endpoints, as its serving code defines them.

``POST /v1/load_lora_adapter {lora_name, lora_path}`` (the server runs with
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` and ``--enable-lora``) is answered 200 with a text
body, or an error object; ``POST /v1/unload_lora_adapter {lora_name}``. A call names the adapter
as its ``model``, and vLLM's answer names it back in ``model``. No route of vLLM's server loads
full weights from a folder: its weight-transfer routes carry tensors over NCCL or CUDA IPC from
the trainer's own GPU process, so with full weights the runtime refuses a ``vllm`` engine
(docs/decisions.md#artifacts). A call that names an adapter vLLM does not hold is answered 404
``NotFoundError`` ("The model `<name>` does not exist.", vllm/entrypoints/openai/serving_engine.py
``_check_model``).
"""

from __future__ import annotations

from typing import Literal

import attrs
import httpx

from reef.core.records import JSON
from reef.engines.admin import ListedAdapters, PublicationError, error_message, request


@attrs.frozen
class VllmAdapters(ListedAdapters):
    """vLLM's run-time LoRA endpoints."""

    kind: str = "vllm"
    weights: Literal["adapter", "full"] = "adapter"

    def load(self, client: httpx.Client, name: str, path: str, artifact_id: str) -> None:
        del artifact_id
        status, parsed, text = request(
            client, "POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}
        )
        message = error_message(parsed, text)
        # Another process published the same artifact: the adapter is there.
        if status == 200 or (status == 400 and "already been loaded" in message):
            return
        raise PublicationError(f"vLLM refused adapter {name} ({path}): {status} {message}")

    def unload(self, client: httpx.Client, name: str) -> None:
        status, parsed, text = request(
            client, "POST", "/v1/unload_lora_adapter", {"lora_name": name}
        )
        if status not in (200, 404):  # 404: already gone
            raise PublicationError(
                f"vLLM did not unload adapter {name}: {status} {error_message(parsed, text)}"
            )

    def model(self, name: str) -> str:
        return name

    def lost(self, status: int, body: JSON | None) -> bool:
        del body
        return status == 404
