"""How an engine takes weights: the :class:`EngineAdmin` contract, and the HTTP exchange the
vLLM (:mod:`reef.engines.vllm`) and SGLang (:mod:`reef.engines.sglang`) admins share.

An admin puts an artifact into a running engine through the engine's own documented endpoints
and says which adapters it holds; :class:`reef.engines.publisher.Publisher` decides when. Both
engines list their loaded adapters in ``GET /v1/models`` (``{data: [{id, root, parent, ...}]}``,
an adapter's card has its base model as ``parent``, in the order they were loaded; SGLang lists
them since late 2025, sgl-project/sglang#12229, and before that the base model only).
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import httpx

from reef.core.records import JSON
from reef.errors import ReefError


class PublicationError(ReefError):
    """The engine did not take an artifact (or did not let an adapter go)."""


class EngineAdmin(Protocol):
    """How one engine takes weights (see the module documentation)."""

    @property
    def kind(self) -> str:
        """The engine's kind (``vllm``, ``sglang``)."""
        ...

    @property
    def weights(self) -> Literal["adapter", "full"]:
        """``adapter`` (loaded beside the base model, named per call) or ``full`` (swapped
        in)."""
        ...

    def load(self, client: httpx.Client, name: str, path: str, artifact_id: str) -> None:
        """Put the artifact at ``path`` (as the engine sees it) into the engine.

        :raises PublicationError: when the engine does not take it.
        """
        ...

    def unload(self, client: httpx.Client, name: str) -> None:
        """Let the adapter ``name`` go. :raises PublicationError: when the engine refuses."""
        ...

    def adapters(self, client: httpx.Client) -> list[str]:
        """The names of the adapters the engine holds, oldest first.

        :raises PublicationError: when the engine cannot say.
        """
        ...

    def model(self, name: str) -> str:
        """The request's ``model`` that reaches the loaded weights ``name``."""
        ...

    def lost(self, status: int, body: JSON | None) -> bool:
        """Whether the engine's refusal of a chat call (its status and error body) says it
        does not have the weights the call named: it restarted without the adapter."""
        ...


def request(
    client: httpx.Client, method: Literal["GET", "POST"], path: str, body: JSON | None = None
) -> tuple[int, Any, str]:
    """Send ``body`` (if any); the status, the answer as JSON (``None`` when it is not JSON) and
    as text. :raises PublicationError: when the engine cannot be reached."""
    try:
        response = client.request(method, path, json=body)
    except httpx.HTTPError as exc:
        raise PublicationError(f"{method} {path}: the engine did not answer: {exc!r}") from exc
    try:
        parsed: Any = response.json()
    except ValueError:
        parsed = None
    return response.status_code, parsed, response.text


def listed_adapters(client: httpx.Client) -> list[str]:
    """The adapters in the engine's ``GET /v1/models`` (the cards with a ``parent``), in its
    order. :raises PublicationError: when the engine does not answer with its list."""
    status, parsed, text = request(client, "GET", "/v1/models")
    cards = parsed.get("data") if isinstance(parsed, dict) else None
    if status != 200 or not isinstance(cards, list):
        raise PublicationError(
            f"GET /v1/models: no model list: {status} {error_message(parsed, text)}"
        )
    return [
        card["id"]
        for card in cards
        if isinstance(card, dict) and card.get("parent") and isinstance(card.get("id"), str)
    ]


def error_message(parsed: Any, text: str) -> str:
    """The message of an engine's error answer (vLLM ``{error: {message}}``, SGLang
    ``{error_message}`` or ``{message}``), else its text."""
    if isinstance(parsed, dict):
        error = parsed.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])
        for key in ("error_message", "message", "detail"):
            if isinstance(parsed.get(key), str):
                return str(parsed[key])
    return text[:300]


class ListedAdapters:
    """An engine that lists its loaded adapters in ``GET /v1/models`` (vLLM, SGLang)."""

    def adapters(self, client: httpx.Client) -> list[str]:
        return listed_adapters(client)
