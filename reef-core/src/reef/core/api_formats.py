"""The API formats Reef records, and what each one's exchange means as chat messages.

Agents call Reef in three formats: OpenAI chat completions, the OpenAI Responses API and the
Anthropic Messages API. A record keeps the exchange in its own format, verbatim; everything
that compares or renders calls (linking, ATIF, rendering) reads it as OpenAI chat messages,
the one form chat templates take (``docs/api-formats.md`` has the table):

- :func:`chat_messages`: a request's input as chat messages, its system prompt first;
- :func:`chat_reply`: a response's answer as one assistant chat message;
- :func:`chat_tools`: the tools a request offers, in chat's ``{"type": "function", ...}`` form;
- :func:`chat_request`: the chat-completions request an engine that speaks only chat answers
  for a Responses or Messages request; what has no chat form is refused with
  :class:`FormatError`, naming the part.

The same conversation reads as the same chat messages whichever format carried it, so a
Responses or Messages call renders to the tokens of the equivalent chat call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, TypeAlias

from reef.errors import ReefError

JSON: TypeAlias = dict[str, Any]

#: OpenAI chat completions (``POST /v1/chat/completions``).
CHAT_COMPLETIONS: Final = "openai.chat.completions"
#: The OpenAI Responses API (``POST /v1/responses``).
RESPONSES: Final = "openai.responses"
#: The Anthropic Messages API (``POST /v1/messages``).
MESSAGES: Final = "anthropic.messages"
#: Every format Reef serves.
API_FORMATS: Final = (CHAT_COMPLETIONS, RESPONSES, MESSAGES)


class FormatError(ReefError, ValueError):
    """A request part that has no chat-completions form (or no form at all).

    :ivar path: the JSON path of the part (``$.input[2].content[0]``).
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{reason} @ {path}")
        self.path = path
        self.reason = reason


# -- reading a request or response as chat messages ---------------------------------------------


def chat_messages(api_format: str, request: Mapping[str, Any]) -> list[JSON]:
    """The input of ``request`` as chat messages: the system prompt first (Responses
    ``instructions``, Messages ``system``), then each turn. A chained Responses request
    (``previous_response_id``) holds only its own turn: so does this.

    Parts that have no chat form are kept as they are (linking compares them as JSON); only
    :func:`chat_request` refuses them.
    """
    if api_format == RESPONSES:
        return _responses_messages(request, strict=False)
    if api_format == MESSAGES:
        return _anthropic_messages(request, strict=False)
    messages = request.get("messages", [])
    return list(messages) if isinstance(messages, list) else []


def chat_reply(api_format: str, response: Mapping[str, Any] | None) -> list[JSON]:
    """The assistant message of each answer of ``response`` (chat: each choice; Responses and
    Messages answer once), in the form an agent sends it back."""
    if not response:
        return []
    if api_format == RESPONSES:
        output = response.get("output")
        if not isinstance(output, list):
            return []
        # An answer of nothing is still an answer, as chat's message without content is.
        return _responses_items(output, "$.output", strict=False) or [{"role": "assistant"}]
    if api_format == MESSAGES:
        content = response.get("content")
        if not isinstance(content, list):
            return []
        return [_anthropic_assistant(content, "$.content", strict=False)]
    choices = response.get("choices") or []
    return [c["message"] for c in choices if isinstance(c, dict) and "message" in c]


def chat_tools(api_format: str, tools: Sequence[Any]) -> list[JSON]:
    """``tools`` (as the request offers them) in chat's function-tool form. A tool of another
    kind (a hosted tool) is kept as it is."""
    if api_format == RESPONSES:
        return [
            _responses_tool(tool, f"$.tools[{i}]", strict=False) for i, tool in enumerate(tools)
        ]
    if api_format == MESSAGES:
        return [
            _anthropic_tool(tool, f"$.tools[{i}]", strict=False) for i, tool in enumerate(tools)
        ]
    return list(tools)


def previous_response_id(api_format: str, request: Mapping[str, Any]) -> str | None:
    """The response a Responses request continues (``previous_response_id``), if any."""
    if api_format != RESPONSES:
        return None
    previous = request.get("previous_response_id")
    return previous if isinstance(previous, str) and previous else None


def input_items(request: Mapping[str, Any]) -> list[JSON]:
    """The ``input`` of a Responses request as a list of items (a string is one user
    message)."""
    given = request.get("input")
    if isinstance(given, str):
        return [{"role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


def resolved_request(
    request: Mapping[str, Any], previous_items: Sequence[Any], previous_output: Sequence[Any]
) -> JSON:
    """A chained Responses request made complete: the conversation of the response it
    continues (``previous_items``, that response's whole input, and ``previous_output``) before
    its own input, as OpenAI resolves ``previous_response_id`` (the earlier ``instructions`` do
    not carry over)."""
    complete = {k: v for k, v in request.items() if k != "previous_response_id"}
    complete["input"] = [*previous_items, *previous_output, *input_items(request)]
    return complete


# -- the chat-completions request of a Responses or Messages request -------------------------

#: Request keys the engine takes in both forms, forwarded unchanged (vLLM's and SGLang's
#: sampling extensions among them).
_SHARED_KEYS: Final = frozenset(
    {
        "model",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "logit_bias",
        "chat_template_kwargs",
        "user",
        "stream",
    }
)
#: Responses keys that are Reef's or the client's business, never the engine's.
_RESPONSES_OWN: Final = frozenset(
    {
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "max_output_tokens",
        "previous_response_id",
        "store",
        "metadata",
        "reasoning",
        "text",
        "top_logprobs",
        "parallel_tool_calls",
        "include",
        "stream_options",
        "truncation",
        "service_tier",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "prompt_cache_options",
    }
)
#: Messages keys that map onto chat keys or are the client's business.
_MESSAGES_OWN: Final = frozenset(
    {
        "messages",
        "system",
        "tools",
        "tool_choice",
        "max_tokens",
        "stop_sequences",
        "metadata",
        "thinking",
        "service_tier",
    }
)
#: Responses keys Reef refuses: they ask for server-side features Reef does not run.
_RESPONSES_REFUSED: Final = {
    "background": "Reef does not run responses in the background; send background: false",
    "conversation": "Reef keeps no conversations; chain calls with previous_response_id",
    "prompt": "Reef holds no prompt templates; send the instructions and input",
    "max_tool_calls": "the engine cannot bound built-in tool calls; leave it out",
    "context_management": "Reef does not compact conversations on the server; leave it out",
}


def chat_request(api_format: str, request: Mapping[str, Any]) -> JSON:
    """The chat-completions request that asks an engine what ``request`` asks.

    ``request`` is complete (a chained Responses request already resolved with
    :func:`resolved_request`). Sampling keys the two forms share are forwarded; a key Reef does
    not know, and a part with no chat form (a hosted tool, an ``item_reference``, a file by
    id), is refused.

    :raises FormatError: naming the first part that has no chat form.
    """
    if api_format == RESPONSES:
        return _responses_chat_request(request)
    if api_format == MESSAGES:
        return _anthropic_chat_request(request)
    return dict(request)


def image_parts(api_format: str, request: Mapping[str, Any]) -> list[str]:
    """Where ``request`` (as its client sent it) holds an image, as JSON paths in its own
    format, in order: a Responses ``input_image`` part of an item's ``content`` or of a
    function call's ``output``; a Messages ``image`` block of a message's ``content`` or of a
    ``tool_result``'s."""
    found: list[str] = []
    nested: tuple[str, ...]
    if api_format == RESPONSES:
        items, root, image, nested = (
            request.get("input"),
            "$.input",
            "input_image",
            ("content", "output"),
        )
    elif api_format == MESSAGES:
        items, root, image, nested = request.get("messages"), "$.messages", "image", ("content",)
    else:
        return found
    for position, item in enumerate(items if isinstance(items, list) else []):
        for key in nested:
            parts = item.get(key) if isinstance(item, Mapping) else None
            for index, part in enumerate(parts if isinstance(parts, list) else []):
                at = f"{root}[{position}].{key}[{index}]"
                kind = part.get("type") if isinstance(part, Mapping) else None
                if kind == image:
                    found.append(at)
                elif kind == "tool_result" and isinstance(part.get("content"), list):
                    found += [
                        f"{at}.content[{k}]"
                        for k, inner in enumerate(part["content"])
                        if isinstance(inner, Mapping) and inner.get("type") == image
                    ]
    return found


def _chat_base(
    request: Mapping[str, Any],
    own: frozenset[str],
    form: str,
    messages: Callable[..., list[JSON]],
    tool: Callable[..., Any],
) -> JSON:
    """The chat request's keys both forms share, its messages and its tools; a key neither
    ``own`` nor shared is refused."""
    for key in request:
        if key not in own and key not in _SHARED_KEYS:
            raise FormatError(f"$.{key}", f"unknown parameter of the {form}")
    chat: JSON = {k: v for k, v in request.items() if k in _SHARED_KEYS}
    chat["messages"] = messages(request, strict=True)
    tools = request.get("tools")
    if tools:
        chat["tools"] = [tool(t, f"$.tools[{i}]", strict=True) for i, t in enumerate(tools)]
    return chat


def _responses_chat_request(request: Mapping[str, Any]) -> JSON:
    for key, reason in _RESPONSES_REFUSED.items():
        if request.get(key) not in (None, False):
            raise FormatError(f"$.{key}", reason)
    own = _RESPONSES_OWN | frozenset(_RESPONSES_REFUSED)
    chat = _chat_base(request, own, "Responses API", _responses_messages, _responses_tool)
    choice = request.get("tool_choice")
    if isinstance(choice, Mapping):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise FormatError("$.tool_choice", "only a function tool choice has a chat form")
        chat["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif choice is not None:
        chat["tool_choice"] = choice
    if request.get("parallel_tool_calls") is not None:
        chat["parallel_tool_calls"] = request["parallel_tool_calls"]
    if request.get("max_output_tokens") is not None:
        chat["max_tokens"] = request["max_output_tokens"]
    if request.get("top_logprobs"):
        chat["logprobs"] = True
        chat["top_logprobs"] = request["top_logprobs"]
    reasoning = request.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("effort") is not None:
        chat["reasoning_effort"] = reasoning["effort"]
    text = request.get("text")
    form = text.get("format") if isinstance(text, Mapping) else None
    if isinstance(form, Mapping) and form.get("type") == "json_schema":
        schema = {k: form[k] for k in ("name", "schema", "strict", "description") if k in form}
        chat["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif isinstance(form, Mapping) and form.get("type") == "json_object":
        chat["response_format"] = {"type": "json_object"}
    if request.get("stream"):
        # The usage is part of the answer's last event in this format: always asked for.
        chat["stream_options"] = {"include_usage": True}
    return chat


def _anthropic_chat_request(request: Mapping[str, Any]) -> JSON:
    chat = _chat_base(request, _MESSAGES_OWN, "Messages API", _anthropic_messages, _anthropic_tool)
    choice = request.get("tool_choice")
    if isinstance(choice, Mapping):
        kind = choice.get("type")
        if kind == "tool":
            chat["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        elif kind in ("auto", "none"):
            chat["tool_choice"] = kind
        elif kind == "any":
            chat["tool_choice"] = "required"
        else:
            raise FormatError("$.tool_choice.type", f"unknown tool choice {kind!r}")
        if choice.get("disable_parallel_tool_use"):
            chat["parallel_tool_calls"] = False
    if request.get("max_tokens") is not None:
        chat["max_tokens"] = request["max_tokens"]
    stops = request.get("stop_sequences")
    if stops:
        chat["stop"] = list(stops)
    metadata = request.get("metadata")
    if isinstance(metadata, Mapping) and isinstance(metadata.get("user_id"), str):
        chat["user"] = metadata["user_id"]
    if request.get("stream"):
        chat["stream_options"] = {"include_usage": True}
    return chat


# -- Responses items ------------------------------------------------------------------------------

#: The item types an assistant turn is made of: they join one assistant chat message.
_ASSISTANT_ITEMS: Final = frozenset({"reasoning", "function_call"})
#: The text parts of either format, and what each calls its text.
_TEXT_PARTS: Final = {"input_text": "text", "output_text": "text", "text": "text"}


def _responses_messages(request: Mapping[str, Any], *, strict: bool) -> list[JSON]:
    messages: list[JSON] = []
    instructions = request.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.append({"role": "system", "content": instructions})
    given = request.get("input")
    if isinstance(given, str):
        messages.append({"role": "user", "content": given})
    elif isinstance(given, list):
        messages.extend(_responses_items(given, "$.input", strict=strict))
    return messages


def _responses_items(items: Sequence[Any], root: str, *, strict: bool) -> list[JSON]:
    """Responses items as chat messages: the reasoning, text and function calls of one turn join
    one assistant message; a function call's output is a tool message."""
    messages: list[JSON] = []
    # The assistant message being built, and what it already holds.
    turn: JSON | None = None
    for position, item in enumerate(items):
        where = f"{root}[{position}]"
        if not isinstance(item, Mapping):
            if strict:
                raise FormatError(where, "an input item must be an object")
            messages.append(item)
            turn = None
            continue
        kind = item.get("type") or "message"
        role = item.get("role")
        if kind in _ASSISTANT_ITEMS or (kind == "message" and role == "assistant"):
            if turn is None or _turn_closed(turn, kind):
                turn = {"role": "assistant"}
                messages.append(turn)
            _add_to_turn(turn, item, kind, where, strict=strict)
            continue
        turn = None
        if kind == "message":
            messages.append(
                {"role": role, "content": _responses_content(item.get("content"), where, strict)}
            )
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": _responses_content(output, f"{where}.output", strict),
                }
            )
        elif strict:
            raise FormatError(f"{where}.type", f"an item of type {kind!r} has no chat form")
        else:
            messages.append(dict(item))
    return messages


def _turn_closed(turn: Mapping[str, Any], kind: str) -> bool:
    """Whether an item of ``kind`` starts a new assistant message rather than joining ``turn``:
    reasoning and text come before the calls of their turn, once each."""
    if kind == "function_call":
        return False
    if kind == "reasoning":
        return "reasoning_content" in turn or "content" in turn or "tool_calls" in turn
    return "content" in turn or "tool_calls" in turn


def _add_to_turn(
    turn: JSON, item: Mapping[str, Any], kind: str, where: str, *, strict: bool
) -> None:
    if kind == "reasoning":
        texts = [p.get("text") for p in item.get("content") or [] if isinstance(p, Mapping)]
        if not texts:
            texts = [p.get("text") for p in item.get("summary") or [] if isinstance(p, Mapping)]
        turn["reasoning_content"] = "".join(t for t in texts if isinstance(t, str))
    elif kind == "function_call":
        turn.setdefault("tool_calls", []).append(
            {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
        )
    else:
        turn["content"] = _responses_content(item.get("content"), f"{where}.content", strict)


def _responses_content(content: Any, where: str, strict: bool) -> Any:
    """A message's content in chat's form: text alone is one string (however many parts
    carry it); images are ``image_url`` parts."""
    if not isinstance(content, list):
        return content
    parts: list[Any] = []
    for position, part in enumerate(content):
        at = f"{where}[{position}]"
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in _TEXT_PARTS and isinstance(part.get(_TEXT_PARTS[kind]), str):
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.append({"type": "text", "text": part["refusal"]})
        elif kind == "input_image" and isinstance(part.get("image_url"), str):
            image = {"url": part["image_url"]}
            if part.get("detail") is not None:
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        elif strict:
            raise FormatError(at, f"a content part of type {kind!r} has no chat form")
        else:
            parts.append(part)
    return _joined(parts)


def _joined(parts: list[Any]) -> Any:
    """Text parts alone as one string, the form a chat agent sends."""
    if all(isinstance(p, Mapping) and p.get("type") == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _responses_tool(tool: Any, where: str, *, strict: bool) -> Any:
    if isinstance(tool, Mapping) and tool.get("type") == "function":
        function = {
            k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool
        }
        return {"type": "function", "function": function}
    if strict:
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        raise FormatError(where, f"a tool of type {kind!r} has no chat form; offer function tools")
    return tool


# -- Messages blocks ------------------------------------------------------------------------------


def _anthropic_messages(request: Mapping[str, Any], *, strict: bool) -> list[JSON]:
    messages: list[JSON] = []
    system = request.get("system")
    if isinstance(system, list):
        system = _anthropic_content(system, "$.system", strict)
    if system:
        messages.append({"role": "system", "content": system})
    for position, message in enumerate(request.get("messages") or []):
        where = f"$.messages[{position}]"
        if not isinstance(message, Mapping):
            if strict:
                raise FormatError(where, "a message must be an object")
            messages.append(message)
            continue
        role = message.get("role")
        content = message.get("content")
        if role == "assistant" and isinstance(content, list):
            messages.append(_anthropic_assistant(content, f"{where}.content", strict=strict))
        elif role == "user" and isinstance(content, list):
            messages.extend(_anthropic_user(content, f"{where}.content", strict=strict))
        elif strict and role not in ("user", "assistant"):
            raise FormatError(
                f"{where}.role", f"a message's role is user or assistant, not {role!r}"
            )
        else:
            messages.append({"role": role, "content": content})
    return messages


def _anthropic_assistant(blocks: Sequence[Any], where: str, *, strict: bool) -> JSON:
    message: JSON = {"role": "assistant"}
    texts: list[Any] = []
    for position, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text":
            texts.append({"type": "text", "text": block.get("text")})
        elif kind == "thinking":
            message["reasoning_content"] = message.get("reasoning_content", "") + str(
                block.get("thinking") or ""
            )
        elif kind == "redacted_thinking":
            continue  # encrypted for Anthropic's servers: no text any template could render
        elif kind == "tool_use":
            message.setdefault("tool_calls", []).append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {
                        "name": block.get("name"),
                        "arguments": _arguments_text(block.get("input")),
                    },
                }
            )
        elif strict:
            raise FormatError(
                f"{where}[{position}]", f"an assistant block of type {kind!r} has no chat form"
            )
        else:
            texts.append(block)
    if texts:
        message["content"] = _joined(texts)
    return message


def _arguments_text(arguments: Any) -> str:
    """A tool call's arguments as chat sends them: JSON text."""
    return json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)


def _anthropic_user(blocks: Sequence[Any], where: str, *, strict: bool) -> list[JSON]:
    """A user turn of blocks: each ``tool_result`` a tool message, the other blocks between
    them one user message each run."""
    messages: list[JSON] = []
    pending: list[Any] = []

    def flush() -> None:
        if pending:
            messages.append({"role": "user", "content": _joined(list(pending))})
            pending.clear()

    for position, block in enumerate(blocks):
        at = f"{where}[{position}]"
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "tool_result":
            flush()
            content = block.get("content")
            if isinstance(content, list):
                content = _anthropic_content(content, f"{at}.content", strict)
            messages.append(
                {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": content or ""}
            )
        else:
            pending.extend(_anthropic_parts([block], where, strict, start=position))
    flush()
    return messages


def _anthropic_content(blocks: Sequence[Any], where: str, strict: bool) -> Any:
    return _joined(_anthropic_parts(blocks, where, strict))


def _anthropic_parts(blocks: Sequence[Any], where: str, strict: bool, start: int = 0) -> list[Any]:
    parts: list[Any] = []
    for offset, block in enumerate(blocks):
        at = f"{where}[{start + offset}]"
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "text" and isinstance(block.get("text"), str):
            parts.append({"type": "text", "text": block["text"]})
        elif kind == "image" and isinstance(block.get("source"), Mapping):
            parts.append(
                {"type": "image_url", "image_url": {"url": _image_url(block["source"], at, strict)}}
            )
        elif strict:
            raise FormatError(at, f"a block of type {kind!r} has no chat form")
        else:
            parts.append(block)
    return parts


def _image_url(source: Mapping[str, Any], where: str, strict: bool) -> Any:
    if source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    if source.get("type") == "url":
        return source.get("url")
    if strict:
        raise FormatError(
            f"{where}.source", f"an image source of type {source.get('type')!r} has no chat form"
        )
    return dict(source)


def _anthropic_tool(tool: Any, where: str, *, strict: bool) -> Any:
    if isinstance(tool, Mapping) and tool.get("type") in (None, "custom") and "name" in tool:
        function = {"name": tool["name"]}
        if tool.get("description") is not None:
            function["description"] = tool["description"]
        function["parameters"] = tool.get("input_schema") or {"type": "object"}
        return {"type": "function", "function": function}
    if strict:
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        raise FormatError(where, f"a tool of type {kind!r} has no chat form; offer custom tools")
    return tool
