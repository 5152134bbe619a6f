"""A scripted OpenAI-compatible engine, for tests that need an engine to answer.

Asked with a user message last, :func:`scripted_engine` calls the ``lookup`` tool with that
text; asked with a tool result last, it answers with the result. It streams too (tool-call
arguments split across chunks, as real engines do), names the artifact that answered in
``x-reef-artifact-id``, breaks a stream off when the user asks it to (``BREAK`` in the
message) and ends one cleanly without ``[DONE]`` when asked (``NODONE``), so tests can see an
engine abort. It counts the calls it was asked (``app.state.calls``). It is a stand-in for an
inference engine (vLLM, SGLang, a hosted API): it implements only ``POST /v1/chat/completions``,
the one endpoint the service calls. Serve it with :func:`reef.testing.service.serve_on_loopback`.

:func:`judge_engine` is a stand-in for a judge model behind an OpenAI-compatible endpoint (a
computed-feedback recipe's judge): it too implements only ``POST /v1/chat/completions``, and
answers each request with the text a test's function gives for its messages, or fails or never
answers when the function says so.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from reef.core.records import JSON

__all__ = ["SCRIPTED_ARTIFACT", "judge_engine", "scripted_engine", "scripted_reply"]

#: The artifact the scripted engine says answered, unless told otherwise.
SCRIPTED_ARTIFACT: Final = "artifact-scripted-1"


def scripted_reply(messages: Sequence[Any]) -> JSON:
    """The scripted engine's reply to ``messages``: a ``lookup`` call for a user message, the
    tool's result as the answer after a tool message."""
    last = messages[-1] if messages else {}
    if isinstance(last, dict) and last.get("role") == "tool":
        return {"role": "assistant", "content": f"answer: {last.get('content')}"}
    text = str(last.get("content") if isinstance(last, dict) else "")
    turn = sum(1 for m in messages if isinstance(m, dict) and m.get("role") == "assistant")
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{turn}_{abs(hash(text)) % 10**8}",
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"query": text})},
            }
        ],
    }


def scripted_engine(artifact_id: str = SCRIPTED_ARTIFACT) -> Starlette:
    """The scripted OpenAI-compatible engine (see the module docstring) at ``/v1``."""

    async def complete(request: Request) -> Response:
        request.app.state.calls += 1
        body = await request.json()
        messages = body.get("messages") or []
        if not isinstance(messages, list) or not messages:
            return JSONResponse({"error": {"message": "messages is required"}}, 400)
        message = scripted_reply(messages)
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        head = {
            "id": f"chatcmpl-{len(messages)}",
            "created": 1,
            "model": body.get("model") or "scripted",
            "system_fingerprint": artifact_id,
        }
        headers = {"x-reef-artifact-id": artifact_id}
        if not body.get("stream"):
            completion = {
                **head,
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            }
            return JSONResponse(completion, headers=headers)
        text = json.dumps(messages[-1])

        async def chunks() -> AsyncIterator[bytes]:
            def event(delta: JSON, reason: str | None = None) -> bytes:
                chunk = {
                    **head,
                    "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": reason}],
                }
                return f"data: {json.dumps(chunk)}\n\n".encode()

            yield event({"role": "assistant", "content": ""})
            if "BREAK" in text:
                raise ConnectionAbortedError("the scripted engine breaks off, as asked")
            for position, call in enumerate(message.get("tool_calls") or []):
                arguments = call["function"]["arguments"]
                half = len(arguments) // 2
                first = {"name": call["function"]["name"], "arguments": arguments[:half]}
                start = {"index": position, "id": call["id"], "type": "function"}
                yield event({"tool_calls": [{**start, "function": first}]})
                rest = {"index": position, "function": {"arguments": arguments[half:]}}
                yield event({"tool_calls": [rest]})
            content = message.get("content")
            if content:
                for piece in (content[: len(content) // 2], content[len(content) // 2 :]):
                    yield event({"content": piece})
            if "NODONE" in text:
                return
            yield event({}, finish)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream", headers=headers)

    app = Starlette(routes=[Route("/v1/chat/completions", complete, methods=["POST"])])
    app.state.calls = 0
    return app


def judge_engine(
    answer: Callable[[list[JSON]], str | int | None], *, silence_seconds: float = 2.0
) -> Starlette:
    """A judge model's OpenAI-compatible endpoint at ``/v1`` (see the module docstring).

    :param answer: the judge's answer to a request's messages: its text; an ``int`` status
        (such as 503) to fail the call with; ``None`` to say nothing for ``silence_seconds`` and
        then fail with 504 (a judge that never answers within a client's timeout).
    """

    async def complete(request: Request) -> Response:
        body = await request.json()
        said = answer(list(body.get("messages") or []))
        if said is None:
            await asyncio.sleep(silence_seconds)
            said = 504
        if isinstance(said, int):
            return JSONResponse({"error": {"message": "the judge fails, as told"}}, said)
        completion = {
            "id": "judge-1",
            "object": "chat.completion",
            "created": 1,
            "model": body.get("model") or "judge",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": said},
                    "finish_reason": "stop",
                }
            ],
        }
        return JSONResponse(completion)

    return Starlette(routes=[Route("/v1/chat/completions", complete, methods=["POST"])])
