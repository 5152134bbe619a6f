"""Answers in the Responses and Messages formats, made from a chat-completions answer.

An engine that speaks only chat completions answers a Responses or Messages call through
:func:`reef.core.api_formats.chat_request`; its answer comes back through a translator, which
takes the answer's pieces as they arrive (:meth:`Translator.add_chunk` for each streamed
``chat.completion.chunk``, :func:`translate_completion` for a whole ``chat.completion``) and
gives the events of the client's own stream format and, at the end, the whole response
(:meth:`Translator.body`). One translator does both, so a call's recorded response is the same
whether it streamed or not. The table of what maps to what is ``docs/api-formats.md``.

- :class:`ResponsesTranslator`: ``response.created`` ... ``response.completed`` and the
  ``Response`` object;
- :class:`MessagesTranslator`: ``message_start`` ... ``message_stop`` and the ``Message``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Final, TypeAlias

from reef.core.api_formats import JSON, MESSAGES, RESPONSES

__all__ = [
    "Event",
    "MessagesTranslator",
    "ResponsesTranslator",
    "Translator",
    "encode_event",
    "translate_completion",
    "translator_for",
]

#: One server-sent event: its name and its data.
Event: TypeAlias = tuple[str, JSON]


def encode_event(event: Event) -> bytes:
    """``event`` as the bytes of a server-sent event (``event:`` and ``data:`` lines)."""
    name, data = event
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class Translator:
    """What both translators share: the answer's pieces in, events and a body out.

    :param response_id: the id the client gets (the record's).
    :param request: the client's request (echoed where the format echoes it).
    """

    def __init__(self, response_id: str, request: Mapping[str, Any]) -> None:
        self.response_id = response_id
        self.request = request
        self.model = str(request.get("model") or "")
        self.created = int(time.time())
        self.finish: str | None = None
        #: The stop string that ended the answer, where the engine names it (vLLM's
        #: ``stop_reason``).
        self.stop_string: str | None = None
        self.usage: JSON = {}
        self.done = False
        # Open tool calls, by the chat chunk's tool call index.
        self._calls: dict[int, int] = {}

    def start(self) -> list[Event]:
        """The events that open the stream."""
        raise NotImplementedError

    def reasoning(self, text: str) -> list[Event]:
        """Reasoning text of the answer."""
        raise NotImplementedError

    def text(self, text: str) -> list[Event]:
        """Text of the answer."""
        raise NotImplementedError

    def call_start(self, call_id: str, name: str) -> list[Event]:
        """A tool call begins."""
        raise NotImplementedError

    def call_arguments(self, text: str) -> list[Event]:
        """More of the open tool call's arguments (JSON text)."""
        raise NotImplementedError

    def end(self) -> list[Event]:
        """The answer is whole: the events that close the stream."""
        raise NotImplementedError

    def error(self, message: str) -> Event:
        """The event that tells the client its stream was broken off."""
        raise NotImplementedError

    def body(self) -> JSON:
        """The whole response as taken so far."""
        raise NotImplementedError

    def add_chunk(self, chunk: Mapping[str, Any]) -> list[Event]:
        """Take one ``chat.completion.chunk`` (its first choice: these formats answer once)."""
        events: list[Event] = []
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = dict(chunk["usage"])
        for piece in chunk.get("choices") or []:
            if not isinstance(piece, Mapping) or piece.get("index", 0) != 0:
                continue
            delta = piece.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str) and reasoning:
                events += self.reasoning(reasoning)
            if isinstance(delta.get("content"), str) and delta["content"]:
                events += self.text(delta["content"])
            for call in delta.get("tool_calls") or []:
                events += self._tool_call(call)
            if piece.get("finish_reason") is not None:
                self.finish = piece["finish_reason"]
                stop = piece.get("stop_reason")
                self.stop_string = stop if isinstance(stop, str) else None
        return events

    def _tool_call(self, call: Any) -> list[Event]:
        if not isinstance(call, Mapping):
            return []
        events: list[Event] = []
        index = call.get("index", len(self._calls))
        function = call.get("function") or {}
        if index not in self._calls:
            self._calls[index] = len(self._calls)
            events += self.call_start(str(call.get("id") or ""), str(function.get("name") or ""))
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            events += self.call_arguments(arguments)
        return events


def translate_completion(translator: Translator, completion: Mapping[str, Any]) -> JSON:
    """The response ``translator`` makes of a whole ``chat.completion`` (its first choice).

    The events it makes on the way are dropped (the opening ones, which only snapshot the
    response, are not made at all)."""
    if isinstance(completion.get("model"), str):
        translator.model = completion["model"]
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        translator.reasoning(reasoning)
    if isinstance(message.get("content"), str) and message["content"]:
        translator.text(message["content"])
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        translator.call_start(str(call.get("id") or ""), str(function.get("name") or ""))
        if isinstance(function.get("arguments"), str) and function["arguments"]:
            translator.call_arguments(function["arguments"])
    translator.finish = choice.get("finish_reason")
    stop = choice.get("stop_reason")
    translator.stop_string = stop if isinstance(stop, str) else None
    if isinstance(completion.get("usage"), Mapping):
        translator.usage = dict(completion["usage"])
    translator.end()
    return translator.body()


def _cached_tokens(usage: Mapping[str, Any]) -> int:
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    return cached if isinstance(cached, int) else 0


# -- the Responses API -----------------------------------------------------------------------------

#: What a chat finish reason means for a response: its status and incomplete reason.
_RESPONSE_ENDS: Final = {
    "length": ("incomplete", "max_output_tokens"),
    "content_filter": ("incomplete", "content_filter"),
    "abort": ("failed", None),
}


class ResponsesTranslator(Translator):
    """A chat answer as the Responses API's ``Response`` and its stream events."""

    def __init__(self, response_id: str, request: Mapping[str, Any]) -> None:
        super().__init__(response_id, request)
        self._output: list[JSON] = []
        self._sequence = 0
        # The item being streamed, if it is still open.
        self._open: JSON | None = None
        self._suffix = response_id.removeprefix("resp_")

    def _event(self, kind: str, **data: Any) -> Event:
        event = {"type": kind, "sequence_number": self._sequence, **data}
        self._sequence += 1
        return kind, event

    def start(self) -> list[Event]:
        snapshot = self.body()
        return [
            self._event("response.created", response=snapshot),
            self._event("response.in_progress", response=snapshot),
        ]

    def _open_item(self, item: JSON) -> list[Event]:
        events = self._close()
        self._output.append(item)
        self._open = item
        index = len(self._output) - 1
        events.append(
            self._event("response.output_item.added", output_index=index, item=dict(item))
        )
        if item["type"] == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item["content"] = [part]
            events.append(
                self._event(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=dict(part),
                )
            )
        elif item["type"] == "reasoning":
            item["content"] = [{"type": "reasoning_text", "text": ""}]
        return events

    def _item_id(self, prefix: str) -> str:
        return f"{prefix}_{self._suffix}_{len(self._output)}"

    def reasoning(self, text: str) -> list[Event]:
        item = {"type": "reasoning", "id": self._item_id("rs"), "summary": []}
        return self._text_delta(item, "response.reasoning_text.delta", text)

    def text(self, text: str) -> list[Event]:
        item = {"type": "message", "id": self._item_id("msg"), "role": "assistant", "content": []}
        return self._text_delta(item, "response.output_text.delta", text, logprobs=[])

    def _text_delta(self, item: JSON, kind: str, text: str, **extra: Any) -> list[Event]:
        """``text`` added to the open item of ``item``'s type, opening ``item`` first when the
        open item is another."""
        events: list[Event] = []
        if self._open is None or self._open["type"] != item["type"]:
            events += self._open_item({**item, "status": "in_progress"})
        assert self._open is not None
        self._open["content"][0]["text"] += text
        where = {"item_id": self._open["id"], "output_index": len(self._output) - 1}
        events.append(self._event(kind, **where, content_index=0, delta=text, **extra))
        return events

    def call_start(self, call_id: str, name: str) -> list[Event]:
        item = {
            "type": "function_call",
            "id": self._item_id("fc"),
            "call_id": call_id,
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        return self._open_item(item)

    def call_arguments(self, text: str) -> list[Event]:
        if self._open is None or self._open["type"] != "function_call":
            return []
        self._open["arguments"] += text
        return [
            self._event(
                "response.function_call_arguments.delta",
                item_id=self._open["id"],
                output_index=len(self._output) - 1,
                delta=text,
            )
        ]

    def _close(self) -> list[Event]:
        item, self._open = self._open, None
        if item is None:
            return []
        index = len(self._output) - 1
        item["status"] = "completed"
        events: list[Event] = []
        if item["type"] == "message":
            part = item["content"][0]
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append(
                self._event("response.output_text.done", **where, text=part["text"], logprobs=[])
            )
            events.append(self._event("response.content_part.done", **where, part=dict(part)))
        elif item["type"] == "reasoning":
            events.append(
                self._event(
                    "response.reasoning_text.done",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    text=item["content"][0]["text"],
                )
            )
        else:
            events.append(
                self._event(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
        events.append(self._event("response.output_item.done", output_index=index, item=dict(item)))
        return events

    def end(self) -> list[Event]:
        events = self._close()
        self.done = True
        body = self.body()
        kind = {"completed": "response.completed", "failed": "response.failed"}
        events.append(self._event(kind.get(body["status"], "response.incomplete"), response=body))
        return events

    def error(self, message: str) -> Event:
        return self._event("error", code="engine_error", message=message, param=None)

    def body(self) -> JSON:
        request = self.request
        status, reason = "in_progress", None
        if self.done:
            status, reason = _RESPONSE_ENDS.get(self.finish or "stop", ("completed", None))
        usage = None
        if self.usage:
            reasoning = (self.usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
            usage = {
                "input_tokens": self.usage.get("prompt_tokens", 0),
                "input_tokens_details": {"cached_tokens": _cached_tokens(self.usage)},
                "output_tokens": self.usage.get("completion_tokens", 0),
                "output_tokens_details": {"reasoning_tokens": reasoning or 0},
                "total_tokens": self.usage.get("total_tokens", 0),
            }
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": (
                {"code": "server_error", "message": "the engine aborted the answer"}
                if status == "failed"
                else None
            ),
            "incomplete_details": None if reason is None else {"reason": reason},
            "instructions": request.get("instructions"),
            "max_output_tokens": request.get("max_output_tokens"),
            "metadata": request.get("metadata") or {},
            "model": self.model,
            "output": [dict(item) for item in self._output],
            "parallel_tool_calls": request.get("parallel_tool_calls", True),
            "previous_response_id": request.get("previous_response_id"),
            "reasoning": request.get("reasoning") or {"effort": None, "summary": None},
            "store": request.get("store", True),
            "temperature": request.get("temperature"),
            "text": request.get("text") or {"format": {"type": "text"}},
            "tool_choice": request.get("tool_choice", "auto"),
            "tools": list(request.get("tools") or []),
            "top_p": request.get("top_p"),
            "truncation": request.get("truncation", "disabled"),
            "usage": usage,
            "user": request.get("user"),
        }


# -- the Messages API ------------------------------------------------------------------------------

#: What a chat finish reason means as a Messages stop reason (``abort`` has none: ``None``).
_STOP_REASONS: Final = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}


class MessagesTranslator(Translator):
    """A chat answer as the Messages API's ``Message`` and its stream events."""

    def __init__(self, response_id: str, request: Mapping[str, Any]) -> None:
        super().__init__(response_id, request)
        self._content: list[JSON] = []
        self._open = False
        # The arguments text of each tool_use block, by block index (the body parses it).
        self._arguments: dict[int, str] = {}

    def start(self) -> list[Event]:
        message = {
            **self.body(),
            "stop_reason": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [
            ("message_start", {"type": "message_start", "message": message}),
            ("ping", {"type": "ping"}),
        ]

    def _block(self, block: JSON) -> list[Event]:
        """Open ``block``, unless the open block is of its type (text goes on); a tool call is
        a block of its own."""
        kind = block["type"]
        current = self._content[-1] if self._open and self._content else None
        if current is not None and current["type"] == kind and kind != "tool_use":
            return []
        events = self._close()
        self._content.append(block)
        self._open = True
        index = len(self._content) - 1
        start = {"type": "content_block_start", "index": index, "content_block": dict(block)}
        events.append(("content_block_start", start))
        return events

    def _delta(self, delta: JSON) -> Event:
        """The event of ``delta`` to the open block."""
        index = len(self._content) - 1
        return "content_block_delta", {
            "type": "content_block_delta",
            "index": index,
            "delta": delta,
        }

    def reasoning(self, text: str) -> list[Event]:
        block = {"type": "thinking", "thinking": "", "signature": ""}
        return self._text_delta(block, "thinking", "thinking_delta", text)

    def text(self, text: str) -> list[Event]:
        return self._text_delta({"type": "text", "text": ""}, "text", "text_delta", text)

    def _text_delta(self, block: JSON, field: str, kind: str, text: str) -> list[Event]:
        """``text`` added to the open block of ``block``'s type (its ``field``), opening
        ``block`` first when the open block is another."""
        events = self._block(block)
        self._content[-1][field] += text
        events.append(self._delta({"type": kind, field: text}))
        return events

    def call_start(self, call_id: str, name: str) -> list[Event]:
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        events = self._block(block)
        self._arguments[len(self._content) - 1] = ""
        return events

    def call_arguments(self, text: str) -> list[Event]:
        index = len(self._content) - 1
        if not self._open or index not in self._arguments:
            return []
        self._arguments[index] += text
        return [self._delta({"type": "input_json_delta", "partial_json": text})]

    def _close(self) -> list[Event]:
        if not self._open:
            return []
        self._open = False
        index = len(self._content) - 1
        if index in self._arguments:
            self._content[index]["input"] = _tool_input(self._arguments[index])
        return [("content_block_stop", {"type": "content_block_stop", "index": index})]

    def end(self) -> list[Event]:
        events = self._close()
        self.done = True
        body = self.body()
        delta = {"stop_reason": body["stop_reason"], "stop_sequence": body["stop_sequence"]}
        events.append(
            ("message_delta", {"type": "message_delta", "delta": delta, "usage": body["usage"]})
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    def error(self, message: str) -> Event:
        return ("error", {"type": "error", "error": {"type": "api_error", "message": message}})

    def _stop(self) -> tuple[str | None, str | None]:
        if not self.done:
            return None, None
        if self.finish == "stop" and self.stop_string is not None:
            return "stop_sequence", self.stop_string
        return _STOP_REASONS.get(self.finish or ""), None

    def body(self) -> JSON:
        stop_reason, stop_sequence = self._stop()
        cached = _cached_tokens(self.usage)
        return {
            "id": self.response_id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [dict(block) for block in self._content],
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": {
                # Anthropic counts the cached part of the prompt apart from its input tokens.
                "input_tokens": self.usage.get("prompt_tokens", 0) - cached,
                "output_tokens": self.usage.get("completion_tokens", 0),
                "cache_creation_input_tokens": 0,
                "cache_read_input_tokens": cached,
            },
        }


def _tool_input(text: str) -> JSON:
    """A tool call's arguments as a ``tool_use`` block's input: the JSON object the text holds
    (arguments that are not one are ``{}``, as ``docs/api-formats.md`` says)."""
    try:
        value = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def translator_for(api_format: str, response_id: str, request: Mapping[str, Any]) -> Translator:
    """The translator of ``api_format`` (:data:`~reef.core.api_formats.RESPONSES` or
    :data:`~reef.core.api_formats.MESSAGES`)."""
    if api_format == RESPONSES:
        return ResponsesTranslator(response_id, request)
    if api_format == MESSAGES:
        return MessagesTranslator(response_id, request)
    raise ValueError(f"no translator for the API format {api_format!r}")
