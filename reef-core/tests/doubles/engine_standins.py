"""Stand-ins for a vLLM and an SGLang server, for tests on a machine without a GPU.

They are stand-ins, not the engines: they implement exactly the endpoints Reef uses, with the
request and answer shapes of the engines' own serving code, and nothing else. No model runs:
an answer says which model (adapter or weights) the call reached, which is what Reef checks.
The "sampled" tokens of an answer are the UTF-8 bytes of its text as ids 0-255 followed by
:data:`STOP_ID`, and the prompt's the bytes of the last message's content: ids that are not
the re-encoding of the text by any real tokenizer, which is what a test of trained tokens needs.

:func:`vllm_standin` (vLLM's OpenAI server with ``--enable-lora`` and
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``):

- ``POST /v1/load_lora_adapter {lora_name, lora_path, load_inplace?}``: 200 with the text
  ``Success: LoRA adapter '<name>' added successfully.``; 400 ``InvalidUserInput`` when a field
  is missing or the name is loaded (unless ``load_inplace``); 404 ``NotFoundError`` when
  ``lora_path`` holds no adapter (no ``adapter_config.json``). Errors are
  ``{"error": {"message", "type", "code"}}``.
- ``POST /v1/unload_lora_adapter {lora_name}``: 200 with the text ``Success: LoRA adapter
  '<name>' removed successfully.``; 404 when no such adapter is loaded.
- ``POST /v1/chat/completions``: ``model`` is the served model name or a loaded adapter's
  (404 otherwise); the answer's ``model`` is that name. Streams when asked. With
  ``return_token_ids`` the answer carries ``prompt_token_ids`` beside the choices and each
  choice's ``token_ids``; streamed, the first chunk carries ``prompt_token_ids`` and each
  choice delta its ``token_ids`` (vllm/entrypoints/openai/serving_chat.py,
  ``chat_completion_full_generator`` and ``chat_completion_stream_generator``). ``logprobs``
  adds OpenAI's ``logprobs.content``, one entry per token.
- ``GET /v1/models``: ``{object: "list", data: [card, ...]}``, the served model's card first,
  then one per loaded adapter in the order they were loaded, with ``id`` its name, ``root`` its
  path and ``parent`` the served model's name (the base model's ``parent`` is ``null``); the
  cards' ``permission`` lists are left out.
- ``POST /v1/responses``: the Responses API as vllm/entrypoints/openai/serving_responses.py
  answers a model without a reasoning parser or harmony: ``model`` checked as for chat (404);
  ``previous_response_id`` is answered 404 ``invalid_request_error`` "Response with id '<id>'
  not found." with ``param`` ``response_id`` (vLLM stores no response unless
  ``VLLM_ENABLE_RESPONSES_API_STORE`` is set, ``_make_not_found_error``); the answer is a
  ``ResponsesResponse`` (``id`` ``resp_...``, one ``message`` item of one ``output_text``,
  ``usage`` with ``input_tokens_details`` and ``output_tokens_details``) and never carries token
  ids. Streamed (``responses_stream_generator``, ``_process_simple_streaming_events``): each
  event as ``event: <type>`` and ``data: <json>`` with its ``sequence_number``, from
  ``response.created`` and ``response.in_progress`` through the item's, part's and text's events
  to ``response.completed``, and no ``[DONE]`` (vllm/entrypoints/openai/api_server.py,
  ``_convert_stream_to_sse_events``).
- ``POST /v1/messages``: the Messages API as vllm/entrypoints/anthropic/serving.py answers it
  (the chat answer converted): ``{id, type: "message", role, content: [{type: "text", text}],
  model, stop_reason, usage: {input_tokens, output_tokens}}`` without ``null`` fields; an
  unknown model 404 as ``{"type": "error", "error": {"type": "NotFoundError", "message"}}``
  (vllm/entrypoints/anthropic/api_router.py, ``translate_error_response``). Streamed
  (``message_stream_converter``): ``message_start``, ``content_block_start``,
  ``content_block_delta`` (``text_delta``), ``content_block_stop``, ``message_delta``,
  ``message_stop``, then ``data: [DONE]``.

:func:`sglang_standin` (SGLang's server with ``--enable-lora``):

- ``POST /load_lora_adapter {lora_name, lora_path, pinned?}`` and ``POST /unload_lora_adapter
  {lora_name}``: ``{success, error_message, loaded_adapters}``, 400 when not ``success`` (a
  name loaded twice: ``Failed to load LoRA adapter <name> because it is already loaded``);
- ``POST /update_weights_from_disk {model_path, weight_version?, ...}``: ``{success, message,
  num_paused_requests}``, 400 when not ``success`` (no model folder at ``model_path``); the
  weight version becomes ``weight_version`` when given;
- ``POST /v1/chat/completions``: ``model`` is the served model name or
  ``<served name>:<adapter>``; the answer's ``model`` repeats the request's, and a whole answer
  carries ``metadata.weight_version`` (a streamed one does not, as in SGLang). An adapter it
  does not hold is answered 400 ``BadRequestError`` "The following requested LoRA adapters are
  not loaded: <name>" (python/sglang/srt/lora/lora_registry.py ``acquire``, a ValueError that
  python/sglang/srt/entrypoints/openai/serving_chat.py answers with ``create_error_response``);
  a negative temperature 400 "temperature must be non-negative"
  (python/sglang/srt/sampling/sampling_params.py ``verify``). With ``return_token_ids`` a
  whole answer's choices each carry ``prompt_token_ids`` and ``token_ids``
  (python/sglang/srt/entrypoints/openai/protocol.py, ``ChatCompletionResponseChoice``); a
  streamed one carries none (``ChatCompletionResponseStreamChoice`` has no such field);
- ``GET /v1/models``: as vLLM's (without ``permission``), the loaded adapters listed after the
  served model, each with ``parent`` the served model's name, as SGLang lists them since 0.5.5.

Both count the calls they received (:attr:`StandInState.calls`, the vLLM stand-in also keeps
the bodies of its Responses and Messages calls in :attr:`StandInState.received`) and fail on
request: the next ``n`` weight loads answer 500 (:meth:`StandInState.refuse_loads`), to test
retries; with :attr:`StandInState.break_streams` set, a streamed Responses or Messages answer
stops after its first text delta, as an engine that dies mid-answer.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from reef.core.records import JSON

__all__ = ["STOP_ID", "StandInState", "sglang_standin", "vllm_standin"]

#: The id a stand-in's reply ends with, as an engine's ends with its stop token.
STOP_ID = 256


@attrs.define
class StandInState:
    """What a stand-in holds: its served name, loaded adapters (name → path), weights version,
    the calls it received (path → count) and the weight loads it is told to refuse."""

    served_model: str
    adapters: dict[str, str] = attrs.field(factory=dict)
    weight_version: str = "default"
    weights_path: str | None = None
    calls: dict[str, int] = attrs.field(factory=dict)
    refused_loads: int = 0
    #: (path, monotonic time) of each weight load that succeeded, in order.
    loads: list[tuple[str, float]] = attrs.field(factory=list)
    #: (path, body) of each Responses and Messages call, in order.
    received: list[tuple[str, JSON]] = attrs.field(factory=list)
    #: Streamed Responses and Messages answers stop after their first text delta.
    break_streams: bool = False

    def refuse_loads(self, count: int) -> None:
        """Answer the next ``count`` weight loads with a 500, as an engine that is down."""
        self.refused_loads = count

    def _count(self, path: str) -> None:
        self.calls[path] = self.calls.get(path, 0) + 1

    def _refuse(self) -> bool:
        if self.refused_loads > 0:
            self.refused_loads -= 1
            return True
        return False


def _reply(model: str, body: JSON) -> JSON:
    messages = body.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    return {
        "role": "assistant",
        "content": f"{model} answers {str(last.get('content'))[:40]}",
    }


def _tokens(request: JSON, message: JSON) -> tuple[list[int], list[int], JSON]:
    """The prompt's and the reply's token ids of a stand-in's answer, and the reply's OpenAI
    ``logprobs`` (see the module documentation)."""
    messages = request.get("messages") or []
    last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
    prompt = list(str(last.get("content")).encode())
    reply = [*str(message["content"]).encode(), STOP_ID]
    entries = [{"token": f"<{i}>", "logprob": -0.25, "bytes": [], "top_logprobs": []}
               for i in reply]  # fmt: skip
    return prompt, reply, {"content": entries}


def _completion(
    request: JSON,
    model: str,
    metadata: JSON | None,
    *,
    stream: bool,
    engine: str,
) -> Response:
    head = {"id": f"chatcmpl-{time.monotonic_ns()}", "created": int(time.time()), "model": model}
    message = _reply(model, request)
    usage = {"prompt_tokens": 4, "completion_tokens": 3, "total_tokens": 7}
    ids = request.get("return_token_ids") is True
    prompt, reply, logprobs = _tokens(request, message)
    if not stream:
        choice: JSON = {"index": 0, "message": message, "finish_reason": "stop"}
        if request.get("logprobs"):
            choice["logprobs"] = logprobs
        body: JSON = {**head, "object": "chat.completion", "choices": [choice], "usage": usage}
        if ids and engine == "vllm":
            body["prompt_token_ids"] = prompt
            choice["token_ids"] = reply
        elif ids:
            choice.update(prompt_token_ids=prompt, token_ids=reply)
        if metadata is not None:
            body["metadata"] = metadata
        return JSONResponse(body)

    async def chunks() -> AsyncIterator[bytes]:
        pieces: list[tuple[JSON, str | None, list[int]]] = [
            ({"role": "assistant", "content": message["content"]}, None, reply[:-1]),
            ({}, "stop", reply[-1:]),
        ]
        for number, (delta, reason, delta_ids) in enumerate(pieces):
            piece: JSON = {"index": 0, "delta": delta, "finish_reason": reason}
            chunk: JSON = {**head, "object": "chat.completion.chunk", "choices": [piece]}
            if ids and engine == "vllm":
                piece["token_ids"] = delta_ids
                if number == 0:
                    chunk["prompt_token_ids"] = prompt
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(chunks(), media_type="text/event-stream")


def _model_list(state: StandInState, owner: str) -> JSONResponse:
    """``GET /v1/models``: the served model's card, then the adapters' in load order."""

    def card(name: str, root: str, parent: str | None, length: int | None) -> JSON:
        return {"id": name, "object": "model", "created": int(time.time()), "owned_by": owner,
                "root": root, "parent": parent, "max_model_len": length}  # fmt: skip

    cards = [card(state.served_model, state.served_model, None, 4096)]
    cards += [card(name, path, state.served_model, None) for name, path in state.adapters.items()]
    return JSONResponse({"object": "list", "data": cards})


def _vllm_error(message: str, kind: str, code: int, param: str | None = None) -> JSONResponse:
    error: JSON = {"message": message, "type": kind, "code": code}
    if param is not None:
        error["param"] = param
    return JSONResponse({"error": error}, code)


def _last_text(turns: Any) -> str:
    """The text of a request's last turn (a Responses ``input`` or Messages ``messages``)."""
    if isinstance(turns, str):
        return turns
    last = turns[-1] if isinstance(turns, list) and turns else {}
    content = last.get("content") if isinstance(last, dict) else None
    if isinstance(content, list):
        content = "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content)


def _events(events: list[tuple[str, JSON]], state: StandInState, done: bool) -> Response:
    """A stream of named events (``event:`` and ``data:`` lines); ``data: [DONE]`` after them
    when ``done``. A stand-in told to break streams stops after the first text delta."""

    async def lines() -> AsyncIterator[bytes]:
        for kind, data in events:
            yield f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()
            if state.break_streams and kind in (
                "response.output_text.delta",
                "content_block_delta",
            ):
                return
        if done:
            yield b"data: [DONE]\n\n"

    return StreamingResponse(lines(), media_type="text/event-stream")


def _responses(request: JSON, model: str, state: StandInState) -> Response:
    """vLLM's answer to a Responses request (see the module documentation)."""
    text = f"{model} answers {_last_text(request.get('input'))[:40]}"
    item_id = f"msg_{uuid.uuid4().hex}"
    part: JSON = {"type": "output_text", "text": text, "annotations": [], "logprobs": None}
    message = {"id": item_id, "type": "message", "role": "assistant", "status": "completed",
               "content": [part]}  # fmt: skip
    usage = {"input_tokens": 4, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 3,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 7}  # fmt: skip
    whole: JSON = {
        "id": f"resp_{uuid.uuid4().hex}", "created_at": int(time.time()),
        "incomplete_details": None, "instructions": request.get("instructions"),
        "metadata": request.get("metadata"), "model": model, "object": "response",
        "output": [message], "parallel_tool_calls": request.get("parallel_tool_calls", True),
        "temperature": request.get("temperature", 1.0),
        "tool_choice": request.get("tool_choice", "auto"), "tools": request.get("tools") or [],
        "top_p": request.get("top_p", 1.0), "background": False,
        "max_output_tokens": request.get("max_output_tokens") or 4092, "max_tool_calls": None,
        "previous_response_id": None, "prompt": None, "reasoning": None,
        "service_tier": "auto", "status": "completed", "text": None, "top_logprobs": None,
        "truncation": "disabled", "usage": usage, "user": None,
    }  # fmt: skip
    if not request.get("stream"):
        return JSONResponse(whole)
    started = {**whole, "output": [], "status": "in_progress", "usage": None}
    where = {"item_id": item_id, "output_index": 0, "content_index": 0}
    events: list[tuple[str, JSON]] = [
        ("response.created", {"response": started}),
        ("response.in_progress", {"response": started}),
        ("response.output_item.added", {"output_index": 0,
         "item": {**message, "status": "in_progress", "content": []}}),
        ("response.content_part.added", {**where, "part": {**part, "text": "", "logprobs": []}}),
        ("response.output_text.delta", {**where, "delta": text, "logprobs": []}),
        ("response.output_text.done", {**where, "text": text, "logprobs": []}),
        ("response.content_part.done", {**where, "part": {**part, "logprobs": None}}),
        ("response.output_item.done", {"output_index": 0, "item": message}),
        ("response.completed", {"response": whole}),
    ]  # fmt: skip
    numbered = [
        (kind, {"type": kind, "sequence_number": number, **data})
        for number, (kind, data) in enumerate(events)
    ]
    return _events(numbered, state, done=False)


def _messages(request: JSON, model: str, state: StandInState) -> Response:
    """vLLM's answer to a Messages request (see the module documentation)."""
    text = f"{model} answers {_last_text(request.get('messages'))[:40]}"
    message_id = f"chatcmpl-{uuid.uuid4().hex}"
    if not request.get("stream"):
        return JSONResponse({
            "id": message_id, "type": "message", "role": "assistant",
            "content": [{"type": "text", "text": text}], "model": model,
            "stop_reason": "end_turn", "usage": {"input_tokens": 4, "output_tokens": 3},
        })  # fmt: skip
    start = {"id": message_id, "type": "message", "role": "assistant", "content": [],
             "model": model, "usage": {"input_tokens": 4, "output_tokens": 0}}  # fmt: skip
    events: list[tuple[str, JSON]] = [
        ("message_start", {"message": start}),
        ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": text}}),
        ("content_block_stop", {"index": 0}),
        ("message_delta", {"delta": {"stop_reason": "end_turn"},
         "usage": {"input_tokens": 4, "output_tokens": 3}}),
        ("message_stop", {}),
    ]  # fmt: skip
    return _events([(kind, {"type": kind, **data}) for kind, data in events], state, done=True)


async def _json(request: Request) -> dict[str, Any]:
    body = await request.json()
    return body if isinstance(body, dict) else {}


def vllm_standin(served_model: str) -> tuple[Starlette, StandInState]:
    """The vLLM stand-in (see the module documentation) serving ``served_model``."""
    state = StandInState(served_model)

    async def load(request: Request) -> Response:
        state._count("/v1/load_lora_adapter")
        body = await _json(request)
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            return _vllm_error(
                "Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput", 400
            )
        if state._refuse():
            return _vllm_error("the engine is not ready", "InternalServerError", 500)
        if not body.get("load_inplace") and name in state.adapters:
            return _vllm_error(
                f"The lora adapter '{name}' has already been loaded. If you want to load the"
                " adapter in place, set 'load_inplace' to True.",
                "InvalidUserInput",
                400,
            )
        if not (Path(path) / "adapter_config.json").is_file():
            return _vllm_error(f"No adapter found for {path}", "NotFoundError", 404)
        state.adapters[name] = path
        state.loads.append((path, time.monotonic()))
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    async def unload(request: Request) -> Response:
        state._count("/v1/unload_lora_adapter")
        name = (await _json(request)).get("lora_name")
        if not name:
            return _vllm_error(
                "'lora_name' needs to be provided to unload a LoRA adapter.",
                "InvalidUserInput",
                400,
            )
        if name not in state.adapters:
            return _vllm_error(f"The lora adapter '{name}' cannot be found.", "NotFoundError", 404)
        del state.adapters[name]
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    async def complete(request: Request) -> Response:
        state._count("/v1/chat/completions")
        body = await _json(request)
        model = body.get("model") or served_model
        if model != served_model and model not in state.adapters:
            return _vllm_error(f"The model `{model}` does not exist.", "NotFoundError", 404)
        return _completion(body, model, None, stream=bool(body.get("stream")), engine="vllm")

    async def models(request: Request) -> Response:
        state._count("/v1/models")
        return _model_list(state, "vllm")

    async def received(request: Request) -> tuple[JSON, str, str | None]:
        """A Responses or Messages call's body, its model, and vLLM's 404 message when the model
        is neither the served one nor a loaded adapter."""
        state._count(request.url.path)
        body = await _json(request)
        state.received.append((request.url.path, body))
        model = body.get("model") or served_model
        known = model == served_model or model in state.adapters
        return body, model, None if known else f"The model `{model}` does not exist."

    async def responses(request: Request) -> Response:
        body, model, unknown = await received(request)
        if unknown is not None:
            return _vllm_error(unknown, "NotFoundError", 404)
        previous = body.get("previous_response_id")
        if previous is not None:
            message = f"Response with id '{previous}' not found."
            return _vllm_error(message, "invalid_request_error", 404, "response_id")
        return _responses(body, model, state)

    async def messages(request: Request) -> Response:
        body, model, unknown = await received(request)
        if unknown is not None:
            error = {"type": "NotFoundError", "message": unknown}
            return JSONResponse({"type": "error", "error": error}, 404)
        return _messages(body, model, state)

    app = Starlette(
        routes=[
            Route("/v1/load_lora_adapter", load, methods=["POST"]),
            Route("/v1/unload_lora_adapter", unload, methods=["POST"]),
            Route("/v1/chat/completions", complete, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
        ]
    )
    return app, state


def sglang_standin(served_model: str) -> tuple[Starlette, StandInState]:
    """The SGLang stand-in (see the module documentation) serving ``served_model``."""
    state = StandInState(served_model)

    def lora_answer(error: str | None) -> JSONResponse:
        loaded = {
            name: {"lora_id": name, "lora_name": name, "lora_path": path, "pinned": False}
            for name, path in state.adapters.items()
        }
        content = {"success": error is None, "error_message": error, "loaded_adapters": loaded}
        return JSONResponse(content, 200 if error is None else 400)

    async def load(request: Request) -> Response:
        state._count("/load_lora_adapter")
        body = await _json(request)
        name, path = str(body.get("lora_name") or ""), str(body.get("lora_path") or "")
        if state._refuse():
            return JSONResponse({"detail": "the engine is not ready"}, 500)
        if name in state.adapters:
            return lora_answer(f"Failed to load LoRA adapter {name} because it is already loaded")
        if not (Path(path) / "adapter_config.json").is_file():
            return lora_answer(f"Failed to load LoRA adapter {name}: no adapter at {path}")
        state.adapters[name] = path
        state.loads.append((path, time.monotonic()))
        return lora_answer(None)

    async def unload(request: Request) -> Response:
        state._count("/unload_lora_adapter")
        name = str((await _json(request)).get("lora_name") or "")
        if name not in state.adapters:
            return lora_answer(f"LoRA adapter {name} is not loaded")
        del state.adapters[name]
        return lora_answer(None)

    async def update(request: Request) -> Response:
        state._count("/update_weights_from_disk")
        body = await _json(request)
        path = str(body.get("model_path") or "")
        if state._refuse():
            return JSONResponse({"detail": "the engine is not ready"}, 500)
        if not (Path(path) / "config.json").is_file():
            content = {
                "success": False,
                "message": f"Failed to get weights iterator: no model at {path}",
                "num_paused_requests": 0,
            }
            return JSONResponse(content, 400)
        state.weights_path = path
        if isinstance(body.get("weight_version"), str):
            state.weight_version = body["weight_version"]
        state.loads.append((path, time.monotonic()))
        content = {
            "success": True,
            "message": "Succeeded to update model weights.",
            "num_paused_requests": 0,
        }
        return JSONResponse(content)

    async def complete(request: Request) -> Response:
        state._count("/v1/chat/completions")
        body = await _json(request)
        model = str(body.get("model") or served_model)
        base, _, adapter = model.partition(":")
        message = None
        if base != served_model:
            message = f"no model {model}"
        elif adapter and adapter not in state.adapters:
            message = (
                f"The following requested LoRA adapters are not loaded: {adapter}\n"
                f"Loaded adapters: odict_keys({list(state.adapters)})."
            )
        elif isinstance(body.get("temperature"), int | float) and body["temperature"] < 0:
            message = f"temperature must be non-negative, got {body['temperature']}."
        if message is not None:
            return JSONResponse(
                {"object": "error", "message": message, "type": "BadRequestError",
                 "param": None, "code": 400},
                400,
            )  # fmt: skip
        metadata = {"weight_version": state.weight_version}
        stream = bool(body.get("stream"))
        return _completion(body, model, metadata, stream=stream, engine="sglang")

    async def models(request: Request) -> Response:
        state._count("/v1/models")
        return _model_list(state, "sglang")

    app = Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/load_lora_adapter", load, methods=["POST"]),
            Route("/unload_lora_adapter", unload, methods=["POST"]),
            Route("/update_weights_from_disk", update, methods=["POST"]),
            Route("/v1/chat/completions", complete, methods=["POST"]),
        ]
    )
    return app, state
