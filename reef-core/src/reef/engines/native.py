"""Answers an engine gives in the client's own format (``ServingSection.native_formats``).

An engine that speaks the Responses or Messages API itself is asked in that format, and its
answer goes back to the client as it is, but for its id: the client gets, and a report names,
the record's id (``resp_...``, ``msg_...``), as on the translated path. :func:`with_record_id`
does that to a whole answer; :class:`NativeStream` to each event of a streamed one, and puts
the whole answer together from the events, so the record of a streamed call is the answer the
engine would have given whole:

- Responses (``response.created`` ... ``response.completed``): the response of the last event
  that carries one (``response.completed``, ``response.failed``, ``response.incomplete`` end
  it); before that, the items of ``response.output_item.done``;
- Messages (``message_start`` ... ``message_stop``): the message of ``message_start``, its
  content blocks from ``content_block_start`` and their deltas (``text_delta``,
  ``input_json_delta``, ``thinking_delta``, ``signature_delta``, ``citations_delta``), its stop
  reason and usage from ``message_delta``.

``docs/api-formats.md#native-forwarding`` says when to forward natively and what it costs.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any, Final

from reef.core.api_formats import JSON, MESSAGES, RESPONSES

__all__ = ["NativeStream", "with_record_id"]

#: The events that end a Responses stream, each carrying the whole response.
_RESPONSE_ENDS: Final = frozenset({"response.completed", "response.failed", "response.incomplete"})


def with_record_id(body: JSON, record_id: str) -> JSON:
    """A whole Responses or Messages answer under the record's id (both formats put it at the
    top of the answer)."""
    return {**body, "id": record_id}


class NativeStream:
    """One streamed answer of ``api_format``: each event under the record's id
    (:meth:`add`), and the whole answer they make (:meth:`body`).

    :ivar ended: the event that ends the answer arrived (``response.completed``,
        ``message_stop``, ...); what comes after it (vLLM's ``[DONE]`` after ``message_stop``)
        is not the answer's.
    """

    def __init__(self, api_format: str, record_id: str) -> None:
        if api_format not in (RESPONSES, MESSAGES):
            raise ValueError(f"{api_format!r} is not streamed natively")
        self.api_format = api_format
        self.record_id = record_id
        self.ended = False
        # Responses: the latest response an event carried, and the finished output items.
        self._response: JSON = {}
        self._items: dict[int, JSON] = {}
        # Messages: the message, its content blocks, and each tool call's arguments so far.
        self._message: JSON = {}
        self._blocks: dict[int, JSON] = {}
        self._arguments: dict[int, str] = {}

    def add(self, event: JSON) -> JSON:
        """Take one event of the stream; the event as the client gets it."""
        if self.api_format == RESPONSES:
            return self._add_responses(event)
        return self._add_messages(event)

    def body(self) -> JSON:
        """The whole answer of the events taken so far (a cut stream's as far as it came)."""
        if self.api_format == RESPONSES:
            if self.ended:
                return self._response
            output = [self._items[i] for i in sorted(self._items)]
            return {**self._response, "id": self.record_id, "output": output}
        content = [self._blocks[i] for i in sorted(self._blocks)]
        return {**self._message, "id": self.record_id, "content": content}

    def _add_responses(self, event: JSON) -> JSON:
        kind = event.get("type")
        response = event.get("response")
        if isinstance(response, dict):
            response = {**response, "id": self.record_id}
            event = {**event, "response": response}
            self._response = response
            if kind in _RESPONSE_ENDS:
                self.ended = True
        elif kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            index = event.get("output_index")
            self._items[index if isinstance(index, int) else len(self._items)] = event["item"]
        return event

    def _add_messages(self, event: JSON) -> JSON:
        kind = event.get("type")
        index = event.get("index")
        if kind == "message_start" and isinstance(event.get("message"), dict):
            self._message = {**event["message"], "id": self.record_id}
            return {**event, "message": self._message}
        if kind == "content_block_start" and isinstance(event.get("content_block"), dict):
            self._blocks[index if isinstance(index, int) else len(self._blocks)] = dict(
                event["content_block"]
            )
        elif kind == "content_block_delta" and isinstance(index, int) and index in self._blocks:
            self._delta(index, event.get("delta") or {})
        elif kind == "content_block_stop" and index in self._arguments:
            assert isinstance(index, int)
            with contextlib.suppress(ValueError):  # arguments cut short stay as they came
                self._blocks[index]["input"] = json.loads(self._arguments.pop(index) or "{}")
        elif kind == "message_delta":
            self._message.update(event.get("delta") or {})
            usage = event.get("usage")
            if isinstance(usage, dict):
                self._message["usage"] = {**(self._message.get("usage") or {}), **usage}
        elif kind == "message_stop":
            self.ended = True
        return event

    def _delta(self, index: int, delta: Any) -> None:
        block = self._blocks[index]
        kind = delta.get("type") if isinstance(delta, dict) else None
        if kind == "input_json_delta":
            self._arguments[index] = self._arguments.get(index, "") + str(
                delta.get("partial_json") or ""
            )
            return
        field = {"text_delta": "text", "thinking_delta": "thinking"}.get(str(kind))
        if field is not None:
            block[field] = str(block.get(field) or "") + str(delta.get(field) or "")
        elif kind == "signature_delta":
            block["signature"] = str(block.get("signature") or "") + str(
                delta.get("signature") or ""
            )
        elif kind == "citations_delta":
            block["citations"] = [*(block.get("citations") or []), delta.get("citation")]
