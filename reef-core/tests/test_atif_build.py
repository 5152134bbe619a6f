"""ATIF built from the inference records of one trajectory; each validates with ``atif``.

rule: P-REND-1 (a sample is an ATIF trajectory without tokens or log probabilities; the
engine's, where it gave them, are kept only on request); the staleness check reads each
record's artifact under extra.reef.records.
"""

from __future__ import annotations

import json
from typing import Any

import atif
import pytest
from hypothesis import given, settings, strategies as st

from reef.core.atif import trajectory_from_json, trajectory_to_json
from reef.core.atif_build import AtifBuildError, trajectory_from_records
from reef.core.records import InferenceRecord
from reef.core.trajectory_index import TrajectoryIndex

SYSTEM = {"role": "system", "content": "You are terse."}
ASK = {"role": "user", "content": [{"type": "text", "text": "What is in /tmp?"}]}
CALL = {
    "role": "assistant",
    "content": None,
    "reasoning_content": "list it",
    "tool_calls": [
        {"id": "t1", "type": "function", "function": {"name": "ls", "arguments": '{"p": "/tmp"}'}},
        {"id": "t2", "type": "function", "function": {"name": "date", "arguments": ""}},
    ],
}
RESULTS = [
    {"role": "tool", "tool_call_id": "t1", "content": "a.txt"},
    {"role": "tool", "tool_call_id": "t2", "content": "Monday"},
]
ANSWER = {"role": "assistant", "content": "a.txt, on Monday."}
TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]


def call(
    record_id: str, messages: list[Any], reply: Any, *, artifact: str, **response: Any
) -> InferenceRecord:
    return InferenceRecord(
        id=record_id,
        scenario="demo",
        request={"model": "qwen", "messages": messages, "tools": TOOLS},
        response={
            "model": "qwen-0.5b",
            "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}],
            **response,
        },
        artifact_id=artifact,
        ended_at=1_700_000_000.5,
    )


FIRST = call(
    "r1",
    [SYSTEM, ASK],
    CALL,
    artifact="w1",
    usage={"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27},
)
SECOND = call(
    "r2",
    [SYSTEM, ASK, CALL, *RESULTS],
    ANSWER,
    artifact="w2",
    usage={
        "prompt_tokens": 40,
        "completion_tokens": 3,
        "prompt_tokens_details": {"cached_tokens": 20},
        "completion_tokens_details": {"reasoning_tokens": 1},
    },
    prompt_token_ids=[5, 6],
)
SECOND.response["choices"][0]["logprobs"] = {
    "content": [{"token": t, "logprob": -0.5} for t in ("a", ".", "!")]
}
SECOND.response["choices"][0]["token_ids"] = [1, 2, 3]


def test_a_tool_using_session_becomes_one_valid_trajectory() -> None:
    """rule: P-REND-1; the index links the calls, the builder turns them into ATIF."""
    index = TrajectoryIndex()
    for record in (FIRST, SECOND):
        index.add(record)
    assert index.trajectory("r2") == ("r1", "r2")

    trajectory = trajectory_from_records([FIRST, SECOND], trajectory_id="r2", keep_tokens=True)
    body = trajectory_to_json(trajectory)
    assert atif.Trajectory.model_validate(body).to_json_dict() == body

    assert [s["source"] for s in body["steps"]] == ["system", "user", "agent", "agent"]
    assert body["steps"][1]["message"] == [{"type": "text", "text": "What is in /tmp?"}]
    tool_step = body["steps"][2]
    assert tool_step["message"] == ""
    assert tool_step["reasoning_content"] == "list it"
    assert tool_step["tool_calls"] == [
        {"tool_call_id": "t1", "function_name": "ls", "arguments": {"p": "/tmp"}},
        {"tool_call_id": "t2", "function_name": "date", "arguments": {}},
    ]
    assert tool_step["observation"]["results"] == [
        {"source_call_id": "t1", "content": "a.txt"},
        {"source_call_id": "t2", "content": "Monday"},
    ]
    assert tool_step["extra"] == {
        "reef": {"record_id": "r1", "artifact_id": "w1", "finish_reason": "stop"}
    }
    assert tool_step["metrics"] == {"prompt_tokens": 20, "completion_tokens": 7}
    assert tool_step["model_name"] == "qwen-0.5b"
    assert tool_step["timestamp"].startswith("2023-11-14T22:13:20.5")
    final = body["steps"][3]
    assert final["message"] == "a.txt, on Monday."
    assert final["metrics"] == {
        "prompt_tokens": 40,
        "completion_tokens": 3,
        "cached_tokens": 20,
        "prompt_token_ids": [5, 6],
        "completion_token_ids": [1, 2, 3],
        "logprobs": [-0.5, -0.5, -0.5],
        "extra": {"completion_tokens_details": {"reasoning_tokens": 1}},
    }
    assert body["agent"]["tool_definitions"] == TOOLS
    assert body["final_metrics"] == {
        "total_prompt_tokens": 60,
        "total_completion_tokens": 10,
        "total_cached_tokens": 20,
        "total_steps": 4,
    }
    assert body["extra"]["reef"] == {
        "scenario": "demo",
        "artifact_id": "w2",
        "records": [{"id": "r1", "artifact_id": "w1"}, {"id": "r2", "artifact_id": "w2"}],
    }
    assert trajectory_from_json(body) == trajectory


def test_a_sample_trajectory_holds_no_tokens_or_log_probabilities() -> None:
    """rule: P-REND-1; by default the engine's token ids and log probabilities are left out."""
    body = trajectory_to_json(trajectory_from_records([FIRST, SECOND], trajectory_id="r2"))
    atif.Trajectory.model_validate(body)
    assert body["steps"][3]["metrics"] == {
        "prompt_tokens": 40,
        "completion_tokens": 3,
        "cached_tokens": 20,
        "extra": {"completion_tokens_details": {"reasoning_tokens": 1}},
    }
    assert "token_ids" not in json.dumps(body)
    assert "logprobs" not in json.dumps(body)


def test_sglang_gives_the_prompt_ids_in_its_choice_and_they_are_kept() -> None:
    """SGLang's chat answer carries ``prompt_token_ids`` in each choice, not beside them
    (python/sglang/srt/entrypoints/openai/protocol.py, ChatCompletionResponseChoice)."""
    record = call("s1", [ASK], ANSWER, artifact="w1")
    record.response["choices"][0].update(prompt_token_ids=[7, 8], token_ids=[9])
    trajectory = trajectory_from_records([record], trajectory_id="s1", keep_tokens=True)
    body = trajectory_to_json(trajectory)
    atif.Trajectory.model_validate(body)
    metrics = body["steps"][-1]["metrics"]
    assert (metrics["prompt_token_ids"], metrics["completion_token_ids"]) == ([7, 8], [9])


def test_context_no_record_made_is_copied_and_arguments_that_are_not_json_are_kept() -> None:
    """An assistant turn the client wrote is marked is_copied_context; odd arguments survive."""
    written = {
        "role": "assistant",
        "content": "earlier",
        "tool_calls": [{"id": "x", "function": {"name": "f", "arguments": "not json"}}],
    }
    record = call(
        "r9",
        [SYSTEM, written, {"role": "tool", "tool_call_id": "x", "content": "?"}],
        ANSWER,
        artifact="w",
    )
    body = trajectory_to_json(trajectory_from_records([record], trajectory_id="t"))
    atif.Trajectory.model_validate(body)
    assert body["steps"][1]["is_copied_context"] is True
    assert "extra" not in body["steps"][1] or "record_id" not in body["steps"][1]["extra"]
    assert body["steps"][1]["tool_calls"][0] == {
        "tool_call_id": "x",
        "function_name": "f",
        "arguments": {},
        "extra": {"reef": {"arguments_text": "not json"}},
    }
    assert "is_copied_context" not in body["steps"][2]


def test_records_that_are_not_one_trajectory_are_refused() -> None:
    with pytest.raises(AtifBuildError, match="at least one"):
        trajectory_from_records([], trajectory_id="t")
    with pytest.raises(AtifBuildError, match="'r1' does not extend the request of 'r2'"):
        trajectory_from_records([SECOND, FIRST], trajectory_id="t")
    other = InferenceRecord(id="o", scenario="s", request={}, response=None, api_format="x")
    with pytest.raises(AtifBuildError, match="API format 'x'"):
        trajectory_from_records([other], trajectory_id="t")
    orphan = call("r3", [SYSTEM, RESULTS[0]], ANSWER, artifact="w")
    with pytest.raises(AtifBuildError, match="tool result 't1' answers no call"):
        trajectory_from_records([orphan], trajectory_id="t")


# -- every trajectory Reef writes validates ---------------------------------------------------

words = st.sampled_from(["", "ok", "ls -la", "é", "{}"])


@st.composite
def sessions(draw: st.DrawFn) -> list[InferenceRecord]:
    """A chat session with tool calls and results: each call resends and extends the last."""
    messages: list[Any] = [{"role": "system", "content": draw(words)}]
    messages.append({"role": "user", "content": draw(words)})
    records = []
    for turn in range(draw(st.integers(1, 4))):
        reply: dict[str, Any] = {"role": "assistant", "content": draw(st.none() | words)}
        ids = [f"c{turn}-{n}" for n in range(draw(st.integers(0, 2)))]
        if ids:
            reply["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
                for i in ids
            ]
        usage = draw(
            st.none()
            | st.fixed_dictionaries(
                {"prompt_tokens": st.integers(0, 99), "completion_tokens": st.integers(0, 99)}
            )
        )
        response: dict[str, Any] = {"choices": [{"message": reply, "finish_reason": "stop"}]}
        if usage:
            response["usage"] = usage
        records.append(
            InferenceRecord(
                id=f"r{turn}",
                scenario="s",
                request={"messages": list(messages)},
                response=response,
                artifact_id=draw(st.none() | st.just("w")),
            )
        )
        messages.append({k: v for k, v in reply.items() if v is not None})
        messages += [{"role": "tool", "tool_call_id": i, "content": draw(words)} for i in ids]
        messages.append({"role": "user", "content": draw(words)})
    return records


@settings(max_examples=100)
@given(sessions())
def test_every_trajectory_reef_builds_validates_with_the_atif_package(
    records: list[InferenceRecord],
) -> None:
    """rule: P-REND-1; and each recorded call is one agent step, in order."""
    body = trajectory_to_json(trajectory_from_records(records, trajectory_id="t"))
    validated = atif.Trajectory.model_validate(body)
    assert json.dumps(validated.to_json_dict(), sort_keys=True) == json.dumps(body, sort_keys=True)
    made = [s["extra"]["reef"]["record_id"] for s in body["steps"] if "extra" in s]
    assert made == [r.id for r in records]
    assert [r["id"] for r in body["extra"]["reef"]["records"]] == made
