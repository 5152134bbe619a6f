"""Rendering samples with the model's chat template (reef.core.chat_rendering)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("jinja2")

from reef.components.local.byte_tokenizer import CHAT_TEMPLATE, ByteTokenizer
from reef.core.chat_rendering import (
    ChatRenderer,
    RenderError,
    normalise_message,
    render_samples,
    trajectory_messages,
)

TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]


def trajectory(*, copied: bool, max_tokens: int | None = None) -> dict[str, Any]:
    """A two-call trajectory: a tool call, its result, and a final answer."""
    extra = {"reef": {"max_tokens": max_tokens}} if max_tokens else None
    return {
        "schema_version": "ATIF-v1.8",
        "agent": {"name": "t", "version": "1", "tool_definitions": TOOLS},
        "steps": [
            {"step_id": 1, "source": "system", "message": "You add."},
            {"step_id": 2, "source": "user", "message": "2+3?"},
            {
                "step_id": 3,
                "source": "agent",
                "message": "",
                "is_copied_context": copied or None,
                "tool_calls": [
                    {"tool_call_id": "c1", "function_name": "add", "arguments": {"a": 2, "b": 3}}
                ],
                "observation": {"results": [{"source_call_id": "c1", "content": "5"}]},
            },
            {"step_id": 4, "source": "agent", "message": "It is 5."},
        ],
        **({"extra": extra} if extra else {}),
    }


def request_of(conversation_messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": "demo", "messages": conversation_messages, "tools": TOOLS}


CALL_1 = [{"role": "system", "content": "You add."}, {"role": "user", "content": "2+3?"}]
REPLY_1 = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a":2,"b":3}'}}
    ],
}
CALL_2 = [*CALL_1, REPLY_1, {"role": "tool", "tool_call_id": "c1", "content": "5"}]


def trained_text(renderer: ChatRenderer, ids: tuple[int, ...], mask: tuple[int, ...]) -> list[str]:
    """The runs of trained tokens of a sequence, as text."""
    spans: list[list[int]] = []
    current: list[int] = []
    for token, bit in zip(ids, mask, strict=True):
        if bit:
            current.append(token)
        elif current:
            spans.append(current)
            current = []
    if current:
        spans.append(current)
    return [renderer.tokenizer.decode(span) for span in spans]


def test_last_call_sample_trains_only_its_last_reply() -> None:
    """rule: P-REND-2 (copied context does not train)."""
    renderer = ChatRenderer(ByteTokenizer())
    rendered = renderer.render_sample(trajectory(copied=True))
    (sequence,) = rendered.sequences
    assert trained_text(renderer, sequence.token_ids, sequence.loss_mask) == ["It is 5.<|im_end|>"]


def test_multi_turn_sample_trains_every_reply() -> None:
    """rule: P-REND-2 (accept_multi_turn_policy_samples: every reply trains)."""
    renderer = ChatRenderer(ByteTokenizer())
    (sequence,) = renderer.render_sample(trajectory(copied=False)).sequences
    assert trained_text(renderer, sequence.token_ids, sequence.loss_mask) == [
        '<tool_call>{"name": "add", "arguments": {"a": 2, "b": 3}}</tool_call><|im_end|>',
        "It is 5.<|im_end|>",
    ]


@pytest.mark.parametrize("args", [{}, {"enable_thinking": False}])
def test_each_reply_follows_the_prompt_its_call_saw(args: dict[str, Any]) -> None:
    """rule: P-REND-3: rendered with the engine's chat template arguments, each call's prompt
    tokens are a prefix of the sample's sequence, and its reply starts right after."""
    renderer = ChatRenderer(ByteTokenizer(), args)
    (sequence,) = renderer.render_sample(trajectory(copied=False)).sequences
    for call in (CALL_1, CALL_2):
        prompt = renderer.prompt_ids(request_of(call))
        assert list(sequence.token_ids[: len(prompt)]) == prompt
        assert sequence.loss_mask[len(prompt)] == 1
        assert not any(sequence.loss_mask[: len(prompt)][-3:])
    if args:
        assert "<think></think>" in renderer.tokenizer.decode(sequence.token_ids)


def test_the_engine_arguments_change_the_prompt() -> None:
    """rule: P-REND-3: the same request renders differently under other template arguments."""
    plain = ChatRenderer(ByteTokenizer()).prompt_ids(request_of(CALL_1))
    no_thinking = ChatRenderer(ByteTokenizer(), {"enable_thinking": False})
    assert no_thinking.prompt_ids(request_of(CALL_1)) != plain
    per_request = {**request_of(CALL_1), "chat_template_kwargs": {"enable_thinking": True}}
    assert no_thinking.prompt_ids(per_request) == plain


def test_arguments_as_text_or_object_render_the_same() -> None:
    text = normalise_message(REPLY_1)
    obj = normalise_message(
        {**REPLY_1, "tool_calls": [{**REPLY_1["tool_calls"][0], "function": {
            "name": "add", "arguments": {"a": 2, "b": 3}}}]}
    )  # fmt: skip
    renderer = ChatRenderer(ByteTokenizer())
    assert renderer.render_text([*CALL_1, text], TOOLS, add_generation_prompt=False) == (
        renderer.render_text([*CALL_1, obj], TOOLS, add_generation_prompt=False)
    )


def test_a_template_that_rewrites_history_trains_each_call_on_its_own_prompt() -> None:
    """rule: P-REND-3: a template that drops earlier reasoning (as Qwen3's does) gives each
    call a sequence of its own whose prefix is that call's prompt."""
    template = CHAT_TEMPLATE.replace(
        "{%- if message.reasoning_content -%}",
        "{%- if message.reasoning_content and loop.last -%}",
    )
    renderer = ChatRenderer(ByteTokenizer(chat_template=template))
    sample = trajectory(copied=False)
    sample["steps"][2]["reasoning_content"] = "add them"
    first, second = renderer.render_sample(sample).sequences
    prompt_1 = renderer.prompt_ids(request_of(CALL_1))
    reply_1 = {**REPLY_1, "reasoning_content": "add them"}
    prompt_2 = renderer.prompt_ids(request_of([*CALL_1, reply_1, CALL_2[-1]]))
    assert list(first.token_ids[: len(prompt_1)]) == prompt_1
    assert list(second.token_ids[: len(prompt_2)]) == prompt_2
    assert "<think>add them</think>" in renderer.tokenizer.decode(first.token_ids)
    assert "add them" not in renderer.tokenizer.decode(second.token_ids)


def test_longer_than_max_tokens_is_left_out_and_counted() -> None:
    """rule: P-REND-5 (extra.reef.max_tokens)."""
    renderer = ChatRenderer(ByteTokenizer())
    length = renderer.render_sample(trajectory(copied=True)).num_tokens
    assert renderer.render_sample(trajectory(copied=True, max_tokens=length)).num_tokens == length
    with pytest.raises(RenderError, match="more than its limit"):
        renderer.render_sample(trajectory(copied=True, max_tokens=length - 1))
    batch = render_samples(
        renderer,
        [trajectory(copied=True), trajectory(copied=True, max_tokens=10), trajectory(copied=True)],
    )
    assert [index for index, _ in batch.rendered] == [0, 2]
    assert batch.unrenderable_samples == 1


def test_samples_that_cannot_render_are_left_out_and_counted() -> None:
    """rule: P-REND-5: no reply to train, content that is not text, a broken step, a template
    that refuses the conversation."""
    renderer = ChatRenderer(ByteTokenizer())
    all_copied = trajectory(copied=True)
    all_copied["steps"][3]["is_copied_context"] = True
    image = trajectory(copied=True)
    image["steps"][1]["message"] = [{"type": "image", "source": {"path": "x.png"}}]
    broken = trajectory(copied=True)
    del broken["steps"][2]["tool_calls"][0]["function_name"]
    no_steps = {"schema_version": "ATIF-v1.8", "agent": {}, "steps": []}
    batch = render_samples(renderer, [all_copied, image, broken, no_steps])
    assert batch.rendered == ()
    assert batch.unrenderable_samples == 4
    refusing = ChatRenderer(
        ByteTokenizer(chat_template="{{ raise_exception('no system prompts') }}")
    )
    assert render_samples(refusing, [trajectory(copied=True)]).unrenderable_samples == 1


def test_observations_become_tool_messages() -> None:
    conversation = trajectory_messages(trajectory(copied=True))
    assert [m["role"] for m in conversation.messages] == [
        "system", "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    assert conversation.trains == (False, False, False, False, True)
    assert conversation.tools == tuple(TOOLS)
