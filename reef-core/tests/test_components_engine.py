"""The built-in local engine: real sampling, log probabilities, artifacts, and prompts that are
exactly the prefixes the component renders from the recorded conversation."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from reef.components.local.component import LocalComponent  # noqa: E402
from reef.core.job_data import JobData, TrajectorySample  # noqa: E402
from reef.engines.local import EngineRequestError, LocalEngine, parse_reply  # noqa: E402

ARGS = {"enable_thinking": False}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


@pytest.fixture
def local(tmp_path: Path) -> LocalComponent:
    config = {
        "state_dir": str(tmp_path),
        "d_model": 32,
        "n_layers": 1,
        "n_heads": 2,
        "max_seq_len": 400,
        "chat_template_args": ARGS,
    }
    return LocalComponent.from_config(config)


@pytest.fixture
def engine(local: LocalComponent) -> LocalEngine:
    local.publish()
    return LocalEngine(local.artifacts, chat_template_args=ARGS, default_max_tokens=12)


def ask(content: str, **sampling: Any) -> dict[str, Any]:
    return {"model": "demo", "messages": [{"role": "user", "content": content}], **sampling}


def test_a_completion_has_the_openai_shape_and_real_logprobs(engine: LocalEngine) -> None:
    response = engine.complete(ask("hi", logprobs=True, top_logprobs=2, seed=1, max_tokens=8))
    assert response["object"] == "chat.completion"
    assert response["system_fingerprint"] == engine.artifact_id
    (choice,) = response["choices"]
    assert choice["message"]["role"] == "assistant"
    assert choice["finish_reason"] in ("stop", "length", "tool_calls")
    entries = choice["logprobs"]["content"]
    usage = response["usage"]
    assert usage["completion_tokens"] == len(entries) <= 8
    assert usage["prompt_tokens"] == len(engine.prompt_ids(ask("hi")))
    for entry in entries:
        assert entry["logprob"] <= 0
        assert len(entry["top_logprobs"]) == 2
        assert entry["top_logprobs"][0]["logprob"] >= entry["logprob"] - 1e-6
    # An untrained model spreads its mass: nothing is close to certain.
    assert math.exp(entries[0]["top_logprobs"][0]["logprob"]) < 0.5


def test_sampling_is_seeded_and_greedy_at_temperature_zero(engine: LocalEngine) -> None:
    def text(**sampling: Any) -> Any:
        return [c["message"]["content"] for c in engine.complete(ask("hi", **sampling))["choices"]]

    assert text(seed=7, n=2) == text(seed=7, n=2)
    assert text(seed=7, n=3) != text(seed=8, n=3)
    assert text(temperature=0, seed=1) == text(temperature=0, seed=2)
    assert text(temperature=1, top_p=1e-9, seed=1) == text(temperature=0)


def test_max_tokens_ends_with_length(engine: LocalEngine) -> None:
    response = engine.complete(ask("hi", max_tokens=1, seed=3, temperature=0))
    assert response["usage"]["completion_tokens"] == 1
    assert response["choices"][0]["finish_reason"] in ("length", "stop")


def test_bad_requests_name_the_field(engine: LocalEngine) -> None:
    with pytest.raises(EngineRequestError, match="temperature"):
        engine.complete(ask("hi", temperature=9))
    with pytest.raises(EngineRequestError, match="messages"):
        engine.complete({"model": "demo", "messages": []})


def test_the_engine_loads_each_newly_published_artifact(
    local: LocalComponent, engine: LocalEngine
) -> None:
    first = engine.complete(ask("hi", seed=1))["system_fingerprint"]
    sample = TrajectorySample(
        {
            "schema_version": "ATIF-v1.8",
            "agent": {"name": "t", "version": "1"},
            "steps": [
                {"step_id": 1, "source": "user", "message": "hi"},
                {"step_id": 2, "source": "agent", "message": "hello"},
            ],
        }
    )
    local.wait(local.submit(JobData("s:data:0", [sample] * 4)))
    artifact = local.publish()
    assert artifact.artifact_id != first
    assert engine.complete(ask("hi", seed=1))["system_fingerprint"] == artifact.artifact_id


def test_tool_call_blocks_become_tool_calls() -> None:
    message = parse_reply(
        'Let me look.<tool_call>{"name": "lookup", "arguments": {"q": 1}}</tool_call>'
    )
    assert message["content"] == "Let me look."
    (call,) = message["tool_calls"]
    assert call["function"] == {"name": "lookup", "arguments": '{"q": 1}'}
    assert parse_reply('<tool_call>{"name": "a"}</tool_call>')["content"] is None
    assert parse_reply("<tool_call>not json</tool_call>") == {
        "role": "assistant",
        "content": "<tool_call>not json</tool_call>",
    }
    assert parse_reply("<think>hm</think>ok")["reasoning_content"] == "hm"


def test_prompts_of_calls_are_prefixes_of_their_rendered_sample(
    local: LocalComponent, engine: LocalEngine
) -> None:
    """rule: P-REND-3: a multi-turn conversation run through the engine, recorded as an ATIF
    trajectory, renders so that each call's prompt tokens are the sequence's prefix and its
    reply trains right after."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Find x."},
    ]
    first = {"model": "demo", "messages": list(messages), "tools": TOOLS, "seed": 5}
    reply_1 = engine.complete(first)["choices"][0]["message"]
    # The agent's tool call, as an agent would send it back (arguments as JSON text).
    reply_1 = {
        **reply_1,
        "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": json.dumps({"q": "x"})}}
        ],
    }  # fmt: skip
    messages += [reply_1, {"role": "tool", "tool_call_id": "call_1", "content": "x=4"}]
    second = {"model": "demo", "messages": list(messages), "tools": TOOLS, "seed": 6}
    reply_2 = engine.complete(second)["choices"][0]["message"]
    steps: list[dict[str, Any]] = [
        {"step_id": 1, "source": "system", "message": "Use tools."},
        {"step_id": 2, "source": "user", "message": "Find x."},
        {
            "step_id": 3,
            "source": "agent",
            "message": reply_1["content"] or "",
            "tool_calls": [
                {"tool_call_id": "call_1", "function_name": "lookup", "arguments": {"q": "x"}}
            ],
            "observation": {"results": [{"source_call_id": "call_1", "content": "x=4"}]},
        },
        {"step_id": 4, "source": "agent", "message": reply_2["content"] or ""},
    ]
    trajectory = {
        "schema_version": "ATIF-v1.8",
        "agent": {"name": "t", "version": "1", "tool_definitions": TOOLS},
        "steps": steps,
    }
    (sequence,) = local.renderer.render_sample(trajectory).sequences
    for request in (first, second):
        prompt = engine.prompt_ids(request)
        assert list(sequence.token_ids[: len(prompt)]) == prompt
        assert sequence.loss_mask[len(prompt)] == 1
    prompt_2 = engine.prompt_ids(second)
    assert sum(sequence.loss_mask[len(prompt_2) :]) == len(sequence.token_ids) - len(prompt_2) - 1


def test_a_reply_is_valid_text_that_encodes_back_to_the_very_tokens_sampled(
    local: LocalComponent,
) -> None:
    """A reply is recorded and trained as its text: a byte-level model samples only bytes that
    keep it valid UTF-8, so the trainer's tokens are the sampled ones, even when the reply is
    cut at its token limit (a fresh model samples every byte about as often)."""
    from reef.components.local.causal_lm import SamplingRequest

    tokenizer = local.model.tokenizer
    prompt = tuple(tokenizer.encode("hi"))
    for limit in (1, 2, 3, 24):
        request = SamplingRequest(prompt, 16, 1.5, 1.0, limit, (), limit, 0)
        for generation in local.model.generate(request):
            ids = list(generation.token_ids)
            text = tokenizer.decode(ids)
            assert "\ufffd" not in text
            assert tokenizer.encode(text) == ids


def test_inside_a_character_only_its_continuation_bytes_may_come() -> None:
    from reef.components.local.tiny_gpt import utf8_continuations

    def allowed(generated: list[int], remaining: int) -> set[int]:
        return set(torch.nonzero(utf8_continuations(generated, remaining)).flatten().tolist())

    assert allowed([0xE0], 2) == set(range(0xA0, 0xC0))  # no overlong form
    assert allowed([0xF0, 0x90], 2) == set(range(0x80, 0xC0))
    between = allowed([0x61], 1)  # one token left: no character of two bytes or more
    assert between == set(range(0x80)) | set(range(256, 263))
    assert allowed([0xC3, 0xA9], 4) == between | set(range(0xC2, 0xF5))
