"""Chat answers translated into Responses and Messages answers (reef.engines.translation).

A streamed answer and the same answer whole translate to the same response (so a record is
the same whether its call streamed), the stream's events carry what the response holds, and
each chat finish reason maps as docs/api-formats.md#answers says.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

# The chunks of a whole answer come from the service's engine module (the server extra).
pytest.importorskip("anyio")

from reef.core.api_formats import MESSAGES, RESPONSES, chat_reply, image_parts
from reef.engines.interface import chunks_of
from reef.engines.translation import translate_completion, translator_for

REQUEST = {"model": "m", "input": "hi", "max_tokens": 16, "messages": []}


@st.composite
def completions(draw: st.DrawFn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if draw(st.booleans()):
        message["reasoning_content"] = draw(st.text(min_size=1, max_size=8))
    if draw(st.booleans()):
        message["content"] = draw(st.text(min_size=1, max_size=8))
    calls = draw(st.integers(0, 2))
    if calls:
        message["tool_calls"] = [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": f"f{n}", "arguments": json.dumps({"n": n})},
            }
            for n in range(calls)
        ]
    finish = draw(st.sampled_from(["stop", "length", "tool_calls", "content_filter", "abort"]))
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "served",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }


def streamed(api_format: str, completion: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    translator = translator_for(
        api_format, "resp_x" if api_format == RESPONSES else "msg_x", REQUEST
    )
    translator.created = 0
    events = translator.start()
    for chunk in chunks_of(completion, include_usage=True):
        events += translator.add_chunk(chunk)
    events += translator.end()
    return events, translator.body()


def whole(api_format: str, completion: dict[str, Any]) -> dict[str, Any]:
    translator = translator_for(
        api_format, "resp_x" if api_format == RESPONSES else "msg_x", REQUEST
    )
    translator.created = 0
    return translate_completion(translator, completion)


@settings(max_examples=80, deadline=None)
@given(completions(), st.sampled_from([RESPONSES, MESSAGES]))
def test_a_streamed_answer_translates_as_the_whole_answer(
    completion: dict[str, Any], api_format: str
) -> None:
    events, body = streamed(api_format, completion)
    assert body == whole(api_format, completion)
    message = completion["choices"][0]["message"]
    (reply,) = chat_reply(api_format, body)
    # What the answer said survives: text, reasoning, calls (arguments as JSON).
    assert reply.get("content") == message.get("content")
    assert reply.get("reasoning_content") == message.get("reasoning_content")
    calls = [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in reply.get("tool_calls", [])
    ]
    wanted = [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls", [])
    ]
    assert calls == wanted
    if api_format == RESPONSES:
        assert [e[1]["sequence_number"] for e in events] == list(range(len(events)))
        assert events[-1][1]["response"] == body
        deltas = "".join(e[1]["delta"] for e in events if e[0] == "response.output_text.delta")
        assert deltas == (message.get("content") or "")
    else:
        assert [e[0] for e in events[:2]] == ["message_start", "ping"]
        assert [e[0] for e in events[-2:]] == ["message_delta", "message_stop"]
        starts = [e for e in events if e[0] == "content_block_start"]
        stops = [e for e in events if e[0] == "content_block_stop"]
        assert len(starts) == len(stops) == len(body["content"])


@pytest.mark.parametrize(
    ("finish", "status", "reason", "stop_reason"),
    [
        ("stop", "completed", None, "end_turn"),
        ("tool_calls", "completed", None, "tool_use"),
        ("length", "incomplete", "max_output_tokens", "max_tokens"),
        ("content_filter", "incomplete", "content_filter", "refusal"),
        ("abort", "failed", None, None),
    ],
)
def test_finish_reasons_map_to_each_formats_end(
    finish: str, status: str, reason: str | None, stop_reason: str | None
) -> None:
    completion = {
        "model": "served",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": finish}
        ],
        "usage": {
            "prompt_tokens": 7,
            "completion_tokens": 3,
            "total_tokens": 10,
            "prompt_tokens_details": {"cached_tokens": 2},
        },
    }
    response = whole(RESPONSES, completion)
    assert response["status"] == status
    assert response["incomplete_details"] == (None if reason is None else {"reason": reason})
    assert response["usage"]["input_tokens"] == 7
    assert response["usage"]["input_tokens_details"] == {"cached_tokens": 2}
    message = whole(MESSAGES, completion)
    assert message["stop_reason"] == stop_reason
    # Anthropic counts cached prompt tokens apart from the input tokens.
    assert message["usage"]["input_tokens"] == 5
    assert message["usage"]["cache_read_input_tokens"] == 2


def test_a_stop_string_the_engine_names_is_the_stop_sequence() -> None:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "x"},
        "finish_reason": "stop",
        "stop_reason": "END",
    }
    message = whole(MESSAGES, {"choices": [choice]})
    assert (message["stop_reason"], message["stop_sequence"]) == ("stop_sequence", "END")


def test_the_image_parts_of_a_request_are_named_in_its_own_format() -> None:
    """Where a Responses or Messages request holds images, as the paths its client would
    read in a refusal: message content, a function call's output, a tool result's content."""
    png = "data:image/png;base64,iVBORw0KGgo="
    responses = {
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "see"},
                                         {"type": "input_image", "image_url": png}]},
            {"type": "function_call_output", "call_id": "c",
             "output": [{"type": "input_image", "image_url": png}]},
        ]
    }  # fmt: skip
    assert image_parts(RESPONSES, responses) == ["$.input[1].content[1]", "$.input[2].output[0]"]
    assert image_parts(RESPONSES, {"input": "just text"}) == []
    source = {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}
    messages = {
        "messages": [
            {"role": "user", "content": [{"type": "image", "source": source}]},
            {"role": "assistant", "content": "a picture"},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                          "content": [{"type": "text", "text": "x"},
                                                      {"type": "image", "source": source}]}]},
        ]
    }  # fmt: skip
    assert image_parts(MESSAGES, messages) == [
        "$.messages[0].content[0]",
        "$.messages[2].content[0].content[1]",
    ]
    assert image_parts("chat.completions", {"messages": []}) == []
