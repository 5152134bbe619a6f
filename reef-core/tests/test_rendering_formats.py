"""A conversation renders to the same tokens whatever API format carried it.

rule: P-REND-2 — one tool-calling conversation with reasoning, recorded as chat completions, as
Responses calls (resent whole, or chained by ``previous_response_id``) and as Messages calls,
builds ATIF trajectories that the chat template renders to equal token ids and loss masks; and
the prompt the engine is given for each call (its request translated to chat,
``reef.core.api_formats.chat_request``) is token for token the chat call's prompt.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("jinja2")

from reef.components.local.byte_tokenizer import CHAT_TEMPLATE as DEMO_TEMPLATE, ByteTokenizer
from reef.core.api_formats import (
    CHAT_COMPLETIONS,
    MESSAGES,
    RESPONSES,
    chat_request,
    input_items,
    resolved_request,
)
from reef.core.atif import trajectory_to_json
from reef.core.atif_build import trajectory_from_records
from reef.core.chat_rendering import ChatRenderer, RenderError
from reef.core.records import InferenceRecord

# The Qwen-like template of the Hugging Face test model: tool responses in a user turn,
# reasoning in <think> blocks (transformers is not needed to render it).
QWEN_LIKE = pytest.importorskip("reef.testing.hf_model").CHAT_TEMPLATE

SYSTEM = "You add numbers with the tool."
QUESTION = "What is 2+3?"
REASONING = "I should call add."
ARGUMENTS = {"a": 2, "b": 3}
CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "description": "Add two numbers.",
            "parameters": {"type": "object", "properties": {"a": {}, "b": {}}},
        },
    }
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "add", "arguments": json.dumps(ARGUMENTS)},
}
REPLY_1 = {
    "role": "assistant",
    "content": None,
    "reasoning_content": REASONING,
    "tool_calls": [CALL],
}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "5"}
REPLY_2 = {"role": "assistant", "content": "It is 5."}


def chat_records() -> list[InferenceRecord]:
    first = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    return [
        InferenceRecord(
            id="c1",
            scenario="s",
            request={"model": "m", "messages": first, "tools": CHAT_TOOLS},
            response={"choices": [{"index": 0, "message": REPLY_1, "finish_reason": "tool_calls"}]},
        ),
        InferenceRecord(
            id="c2",
            scenario="s",
            request={"model": "m", "messages": [*first, REPLY_1, RESULT], "tools": CHAT_TOOLS},
            response={"choices": [{"index": 0, "message": REPLY_2, "finish_reason": "stop"}]},
        ),
    ]


RESPONSES_TOOLS = [{"type": "function", **CHAT_TOOLS[0]["function"]}]
RESPONSES_OUTPUT_1 = [
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": REASONING}],
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "add",
        "arguments": json.dumps(ARGUMENTS),
        "status": "completed",
    },
]
RESPONSES_OUTPUT_2 = [
    {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": "It is 5.", "annotations": []}],
    }
]
RESULT_ITEM = {"type": "function_call_output", "call_id": "call_1", "output": "5"}


def responses_records(*, chained: bool) -> list[InferenceRecord]:
    first = {"model": "m", "instructions": SYSTEM, "input": QUESTION, "tools": RESPONSES_TOOLS}
    second: dict[str, Any] = {**first, "input": [{"role": "user", "content": QUESTION}]}
    second["input"] += [*RESPONSES_OUTPUT_1, RESULT_ITEM]
    if chained:
        second = {**first, "previous_response_id": "resp_1", "input": [RESULT_ITEM]}
    return [
        InferenceRecord(
            id="resp_1",
            scenario="s",
            request=first,
            response={"id": "resp_1", "status": "completed", "output": RESPONSES_OUTPUT_1},
            api_format=RESPONSES,
        ),
        InferenceRecord(
            id="resp_2",
            scenario="s",
            request=second,
            response={"id": "resp_2", "status": "completed", "output": RESPONSES_OUTPUT_2},
            api_format=RESPONSES,
        ),
    ]


MESSAGES_TOOLS = [
    {
        "name": "add",
        "description": "Add two numbers.",
        "input_schema": CHAT_TOOLS[0]["function"]["parameters"],
    }
]
MESSAGES_REPLY_1 = [
    {"type": "thinking", "thinking": REASONING, "signature": "sig"},
    {"type": "tool_use", "id": "call_1", "name": "add", "input": ARGUMENTS},
]


def messages_records() -> list[InferenceRecord]:
    first = [{"role": "user", "content": QUESTION}]
    second = [
        *first,
        {"role": "assistant", "content": MESSAGES_REPLY_1},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "5"}],
        },
    ]
    asked = {"model": "m", "max_tokens": 64, "system": SYSTEM, "tools": MESSAGES_TOOLS}
    return [
        InferenceRecord(
            id="msg_1",
            scenario="s",
            request={**asked, "messages": first},
            response={"id": "msg_1", "content": MESSAGES_REPLY_1, "stop_reason": "tool_use"},
            api_format=MESSAGES,
        ),
        InferenceRecord(
            id="msg_2",
            scenario="s",
            request={**asked, "messages": second},
            response={
                "id": "msg_2",
                "content": [{"type": "text", "text": "It is 5."}],
                "stop_reason": "end_turn",
            },
            api_format=MESSAGES,
        ),
    ]


FORMS = {
    "responses": lambda: responses_records(chained=False),
    "responses-chained": lambda: responses_records(chained=True),
    "messages": messages_records,
}


def rendered(records: list[InferenceRecord], renderer: ChatRenderer) -> Any:
    trajectory = trajectory_to_json(trajectory_from_records(records, trajectory_id="t"))
    return renderer.render_sample(trajectory)


def engine_requests(records: list[InferenceRecord]) -> list[dict[str, Any]]:
    """The chat request the engine is given for each call: chained calls resolved as the
    service resolves them."""
    requests = []
    items: list[Any] = []
    output: list[Any] = []
    for record in records:
        request = record.request
        if record.api_format == RESPONSES and request.get("previous_response_id"):
            request = resolved_request(request, items, output)
        if record.api_format == RESPONSES:
            items, output = input_items(request), (record.response or {})["output"]
        requests.append(chat_request(record.api_format, request))
    return requests


@pytest.mark.parametrize("template", [DEMO_TEMPLATE, QWEN_LIKE], ids=["demo", "qwen-like"])
@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_format_renders_the_token_ids_of_the_equivalent_chat_call(
    template: str, form: str
) -> None:
    """rule: P-REND-2, P-REND-3 — equal token ids and loss masks for the whole trajectory, and
    the engine's prompt of each call equal to the chat call's."""
    renderer = ChatRenderer(ByteTokenizer(template))
    chat = chat_records()
    other = FORMS[form]()
    assert other[0].api_format != CHAT_COMPLETIONS
    assert rendered(other, renderer) == rendered(chat, renderer)
    for translated, asked in zip(engine_requests(other), engine_requests(chat), strict=True):
        assert renderer.prompt_ids(translated) == renderer.prompt_ids(asked)


def test_reasoning_renders_and_trains() -> None:
    """The reasoning of a Responses ``reasoning`` item or a Messages ``thinking`` block is in
    the trained reply, as the chat call's ``reasoning_content`` is."""
    renderer = ChatRenderer(ByteTokenizer())
    for form in FORMS.values():
        (sequence,) = rendered(form(), renderer).sequences
        pairs = zip(sequence.token_ids, sequence.loss_mask, strict=True)
        trained = renderer.tokenizer.decode([token for token, mask in pairs if mask])
        assert f"<think>{REASONING}</think>" in trained


def test_the_engine_prompt_joins_text_parts_and_refuses_what_is_not_text() -> None:
    """A request's text parts render as one text, as a sample's do; an image part cannot be
    rendered by a text-only model and is refused, naming it (the engine's 400)."""
    renderer = ChatRenderer(ByteTokenizer())
    parts = [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+3?"}]
    asked = {"messages": [{"role": "user", "content": QUESTION}]}
    split = {"messages": [{"role": "user", "content": parts}]}
    assert renderer.prompt_ids(split) == renderer.prompt_ids(asked)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    with pytest.raises(RenderError, match=r"messages\[0\]\.content\[1\]: .* 'image_url'"):
        renderer.prompt_ids({"messages": [{"role": "user", "content": [parts[0], image]}]})
