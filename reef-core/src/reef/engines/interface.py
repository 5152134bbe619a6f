"""The engines the inference service forwards to, and how a streamed answer is put together.

Two kinds, behind one interface (:class:`ChatEngine`):

- :class:`~reef.engines.http.HttpEngine`: any OpenAI-compatible server (vLLM, SGLang,
  another Reef) by base URL, over keep-alive HTTP/1.1 connections it speaks itself;
- :class:`FunctionEngine`: an engine that is a function of the request (the built-in
  :class:`~reef.engines.local.LocalEngine`), run on a worker thread so the event loop
  never waits for the model. It streams by answering whole and sending the answer as chunks.

:class:`ChunkAssembler` rebuilds the full ``chat.completion`` body from the chunks of a stream,
so the recorded response is the same whether the client streamed or not.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Final, Protocol

import anyio.to_thread
import attrs

from reef.core.api_formats import CHAT_COMPLETIONS
from reef.core.records import JSON
from reef.errors import ReefError

__all__ = [
    "ARTIFACT_HEADER",
    "ChatEngine",
    "ChunkAssembler",
    "CompletionFunction",
    "EngineAnswer",
    "EngineError",
    "EngineStream",
    "EngineUnavailable",
    "FunctionEngine",
    "as_asked",
    "asking_for_tokens",
]

#: The response header by which an engine names the artifact that answered.
ARTIFACT_HEADER = "x-reef-artifact-id"


class EngineError(ReefError):
    """The engine refused or failed a call before answering.

    :ivar status: the HTTP status to give the client (the engine's own for a 4xx, 502 when it
        could not be reached or failed).
    :ivar body: the engine's error body when it gave one.
    :ivar retry_after: with a 503, the seconds after which the client may try again.
    """

    def __init__(
        self,
        status: int,
        message: str,
        body: JSON | None = None,
        *,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = body
        self.retry_after = retry_after


class EngineUnavailable(ReefError):
    """A :class:`CompletionFunction` cannot answer yet (the local engine before the first
    artifact is published): the client gets a 503 with ``Retry-After``, which OpenAI's clients
    retry, instead of a 400 they give up on.

    :ivar retry_after: the seconds a client is told to wait before it tries again.
    """

    def __init__(self, message: str, *, retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after


#: The request fields by which Reef asks an engine for what it sampled: the token ids of the
#: prompt and of each reply (vLLM's and SGLang's ``return_token_ids``) and each token's log
#: probability (OpenAI's ``logprobs``).
TOKEN_FIELDS: Final = {"return_token_ids": True, "logprobs": True}


def asking_for_tokens(request: JSON) -> JSON:
    """``request`` as forwarded to an engine that returns what it sampled
    (:attr:`ChatEngine.returns_tokens`): asking for the token ids and log probabilities, which
    the record keeps and the client gets only when it asked (:func:`as_asked`)."""
    return {**request, **TOKEN_FIELDS}


def as_asked(body: JSON, request: JSON) -> tuple[JSON, bool]:
    """An answer (a ``chat.completion`` or one chunk of a stream) as the client that sent
    ``request`` asked for it: without token ids unless it set ``return_token_ids``, without log
    probabilities unless it set ``logprobs``; and whether anything was taken out."""
    keep_ids = request.get("return_token_ids") is True
    keep_logprobs = bool(request.get("logprobs"))
    if keep_ids and keep_logprobs:
        return body, False
    changed = False
    shown = dict(body)
    if not keep_ids and "prompt_token_ids" in shown:
        del shown["prompt_token_ids"]
        changed = True
    choices = []
    for choice in body.get("choices") or []:
        if isinstance(choice, dict):
            choice = dict(choice)
            for key in ("token_ids", "prompt_token_ids"):
                if not keep_ids and key in choice:
                    del choice[key]
                    changed = True
            if not keep_logprobs and choice.get("logprobs") is not None:
                choice["logprobs"] = None
                changed = True
        choices.append(choice)
    if "choices" in body:
        shown["choices"] = choices
    return (shown, True) if changed else (body, False)


@attrs.frozen
class EngineAnswer:
    """A whole answer: the ``chat.completion`` body and the artifact that answered (if known).

    ``content`` is the body exactly as the engine sent it, when it came over HTTP: the service
    passes those bytes on to its client instead of encoding ``body`` again.
    """

    body: JSON
    artifact_id: str | None
    content: bytes | None = None


@attrs.frozen
class EngineStream:
    """A streamed answer that started: its SSE data payloads, and the artifact (if known).

    ``events`` yields each ``data:`` payload as text (``[DONE]`` last); it raises when the
    engine breaks off.
    """

    events: AsyncIterator[str]
    artifact_id: str | None


class ChatEngine(Protocol):
    """What the inference service needs of an engine.

    ``returns_tokens``: the engine answers :data:`TOKEN_FIELDS` with the token ids it sampled
    (``prompt_token_ids``, each choice's ``token_ids``) and their log probabilities, so the
    service asks for them on every call (:func:`asking_for_tokens`).

    ``native_formats``: the API formats besides chat completions that the engine is asked in
    their own form (``openai.responses`` on its ``/responses``, ``anthropic.messages`` on its
    ``/messages``) instead of through chat completions (``docs/api-formats.md``).
    """

    returns_tokens: bool
    native_formats: frozenset[str]

    async def complete(self, request: JSON, *, api_format: str = CHAT_COMPLETIONS) -> EngineAnswer:
        """Answer ``request`` (of ``api_format``: chat completions unless one of
        :attr:`native_formats`) whole, in that format. :raises EngineError: when it does not
        answer."""
        ...

    async def stream(self, request: JSON, *, api_format: str = CHAT_COMPLETIONS) -> EngineStream:
        """Start streaming the answer to ``request`` (of ``api_format``), in that format's
        events.

        :raises EngineError: when the engine refuses before the first event.
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class CompletionFunction(Protocol):
    """An engine that is a function: ``complete(request) -> chat.completion`` (blocking)."""

    def complete(self, request: Mapping[str, Any]) -> JSON:
        """Answer a chat-completions request; ``ValueError`` for a request it cannot serve."""
        ...


class FunctionEngine:
    """A :class:`CompletionFunction` (the local engine) served on worker threads.

    The artifact that answered is the body's ``system_fingerprint``, as the local engine
    writes it. The local engine returns the token ids it sampled when asked, as vLLM does.
    """

    returns_tokens = True
    native_formats: frozenset[str] = frozenset()

    def __init__(self, engine: CompletionFunction) -> None:
        self.engine = engine

    async def complete(self, request: JSON, *, api_format: str = CHAT_COMPLETIONS) -> EngineAnswer:
        _chat_only(api_format)
        try:
            body = await anyio.to_thread.run_sync(self.engine.complete, request)
        except EngineUnavailable as exc:
            raise EngineError(503, str(exc), retry_after=exc.retry_after) from exc
        except ValueError as exc:
            raise EngineError(400, str(exc)) from exc
        fingerprint = body.get("system_fingerprint")
        return EngineAnswer(body, fingerprint if isinstance(fingerprint, str) else None)

    async def stream(self, request: JSON, *, api_format: str = CHAT_COMPLETIONS) -> EngineStream:
        _chat_only(api_format)
        answer = await self.complete(request)
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))

        async def events() -> AsyncIterator[str]:
            for chunk in chunks_of(answer.body, include_usage=include_usage):
                yield json.dumps(chunk)
            yield "[DONE]"

        return EngineStream(events(), answer.artifact_id)

    async def aclose(self) -> None:
        return None


def _chat_only(api_format: str) -> None:
    if api_format != CHAT_COMPLETIONS:
        raise ValueError(f"a function engine answers chat completions, not {api_format}")


def chunks_of(body: JSON, *, include_usage: bool) -> list[JSON]:
    """The ``chat.completion.chunk`` values that stream ``body`` (one delta per choice, then
    the finish reasons, then the usage when asked for). Token ids stream as vLLM streams them
    (vllm/entrypoints/openai/serving_chat.py): the prompt's on the first chunk, each delta's
    ``token_ids`` on its choice."""
    head = {
        "id": body.get("id"),
        "object": "chat.completion.chunk",
        "created": body.get("created", int(time.time())),
        "model": body.get("model"),
        "system_fingerprint": body.get("system_fingerprint"),
    }
    chunks: list[JSON] = []
    prompt_ids = body.get("prompt_token_ids")
    for choice in body.get("choices") or []:
        message = dict(choice.get("message") or {})
        delta: JSON = {"role": message.get("role", "assistant")}
        for key in ("content", "reasoning_content", "refusal"):
            if message.get(key) is not None:
                delta[key] = message[key]
        if message.get("tool_calls"):
            delta["tool_calls"] = [
                {**call, "index": position} for position, call in enumerate(message["tool_calls"])
            ]
        piece: JSON = {
            "index": choice.get("index", 0),
            "delta": delta,
            "logprobs": choice.get("logprobs"),
            "finish_reason": None,
        }
        if "token_ids" in choice:
            piece["token_ids"] = choice["token_ids"]
        chunks.append({**head, "choices": [piece]})
        if prompt_ids is not None and len(chunks) == 1:
            chunks[0]["prompt_token_ids"] = prompt_ids
        chunks.append(
            {
                **head,
                "choices": [
                    {
                        "index": choice.get("index", 0),
                        "delta": {},
                        "finish_reason": choice.get("finish_reason"),
                    }
                ],
            }
        )
    if include_usage:
        chunks.append({**head, "choices": [], "usage": body.get("usage")})
    return chunks


class ChunkAssembler:
    """Rebuilds a ``chat.completion`` body from the chunks of a stream, as they arrive."""

    def __init__(self) -> None:
        self._head: JSON = {}
        self._choices: dict[int, JSON] = {}
        self._usage: JSON | None = None
        self.done = False

    def add(self, chunk: JSON) -> None:
        """Take one chunk (a parsed ``data:`` payload)."""
        for key in ("id", "created", "model", "system_fingerprint", "prompt_token_ids"):
            if chunk.get(key) is not None:
                self._head.setdefault(key, chunk[key])
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for piece in chunk.get("choices") or []:
            if not isinstance(piece, dict):
                continue
            index = piece.get("index", 0)
            choice = self._choices.setdefault(
                index if isinstance(index, int) else 0,
                {"message": {"role": "assistant"}, "finish_reason": None, "logprobs": None},
            )
            self._merge_delta(choice["message"], piece.get("delta") or {})
            if piece.get("finish_reason") is not None:
                choice["finish_reason"] = piece["finish_reason"]
            if isinstance(piece.get("token_ids"), list):
                choice["token_ids"] = list(choice.get("token_ids") or []) + piece["token_ids"]
            logprobs = piece.get("logprobs")
            if isinstance(logprobs, dict):
                merged = choice["logprobs"] or {"content": []}
                merged["content"] = list(merged.get("content") or []) + list(
                    logprobs.get("content") or []
                )
                choice["logprobs"] = merged

    @staticmethod
    def _merge_delta(message: JSON, delta: JSON) -> None:
        for key, value in delta.items():
            if key == "tool_calls" and isinstance(value, list):
                calls: list[JSON] = message.setdefault("tool_calls", [])
                for part in value:
                    ChunkAssembler._merge_tool_call(calls, part)
            elif isinstance(value, str) and key != "role":
                message[key] = (message.get(key) or "") + value
            elif value is not None:
                message[key] = value

    @staticmethod
    def _merge_tool_call(calls: list[JSON], part: Any) -> None:
        if not isinstance(part, dict):
            return
        index = part.get("index", len(calls))
        while len(calls) <= index:
            calls.append(
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
        call = calls[index]
        if part.get("id"):
            call["id"] = part["id"]
        if part.get("type"):
            call["type"] = part["type"]
        function = part.get("function") or {}
        for key in ("name", "arguments"):
            if isinstance(function.get(key), str):
                call["function"][key] += function[key]

    def body(self) -> JSON:
        """The ``chat.completion`` body of the chunks taken so far."""
        choices = []
        for index in sorted(self._choices):
            choice = self._choices[index]
            message = dict(choice["message"])
            message.setdefault("content", None)
            whole: JSON = {
                "index": index,
                "message": message,
                "finish_reason": choice["finish_reason"],
                "logprobs": choice["logprobs"],
            }
            if "token_ids" in choice:
                whole["token_ids"] = choice["token_ids"]
            choices.append(whole)
        body: JSON = {**self._head, "object": "chat.completion", "choices": choices}
        if self._usage is not None:
            body["usage"] = self._usage
        return body
