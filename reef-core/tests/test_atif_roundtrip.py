"""ATIF trajectories the public ``atif`` package builds are read by Reef and written back
without loss; Reef refuses what is not ATIF v1.8, naming where and why.

"Without loss" compares JSON: ``atif.Trajectory(...).model_dump(mode="json", exclude_none=True)``
must equal ``trajectory_to_json(trajectory_from_json(that))``, and the result must validate
back to an equal ``atif.Trajectory``. Absent optional fields and ``null`` are the same thing
in ATIF, so ``exclude_none`` is the normal form on both sides. (rule: P-UP-1, uploads are
complete ATIF trajectories; P-REND-1, a sample is an ATIF trajectory.)
"""

from __future__ import annotations

import json
from typing import Any

import atif
import pydantic
import pytest
from hypothesis import given, settings, strategies as st

from reef.core.atif import (
    AtifFormatError,
    Trajectory,
    trajectory_from_json,
    trajectory_to_json,
)


def normal(trajectory: atif.Trajectory) -> dict[str, Any]:
    return trajectory.model_dump(mode="json", exclude_none=True)


def assert_round_trip(trajectory: atif.Trajectory) -> Trajectory:
    dumped = normal(trajectory)
    ours = trajectory_from_json(dumped)
    written = trajectory_to_json(ours)
    assert written == dumped
    assert json.dumps(written, sort_keys=True) == json.dumps(dumped, sort_keys=True)
    assert atif.Trajectory.model_validate(written) == trajectory
    assert trajectory_from_json(written) == ours
    return ours


RICH = atif.Trajectory(
    schema_version="ATIF-v1.8",
    session_id="run-7",
    trajectory_id="main",
    agent=atif.Agent(
        name="swe-agent",
        version="1.2",
        model_name="qwen",
        tool_definitions=[{"type": "function", "function": {"name": "ls", "parameters": {}}}],
        extra={"temperature": 0.2},
    ),
    steps=[
        atif.Step(step_id=1, source="system", message="You fix bugs."),
        atif.Step(
            step_id=2,
            source="user",
            timestamp="2025-10-16T14:30:00Z",
            message=[
                atif.ContentPart(type="text", text="What is in this picture?"),
                atif.ContentPart(
                    type="image", source=atif.ImageSource(media_type="image/png", path="a.png")
                ),
            ],
        ),
        atif.Step(
            step_id=3,
            source="agent",
            model_name="qwen-7b",
            reasoning_effort="high",
            reasoning_content="Look at the files first.",
            message="",
            tool_calls=[
                atif.ToolCall(
                    tool_call_id="t1",
                    function_name="ls",
                    arguments={"path": ".", "flags": [1, {"deep": None}]},
                    extra={"timeout": 3},
                )
            ],
            observation=atif.Observation(
                results=[
                    atif.ObservationResult(source_call_id="t1", content="a.png\n", extra={}),
                    atif.ObservationResult(
                        content=[
                            atif.ContentPart(
                                type="audio",
                                source=atif.AudioSource(
                                    media_type="audio/mp3", path="x.mp3", duration_sec=1.5
                                ),
                            )
                        ],
                        subagent_trajectory_ref=[atif.SubagentTrajectoryRef(trajectory_id="sub")],
                    ),
                ]
            ),
            metrics=atif.Metrics(
                prompt_tokens=30,
                completion_tokens=4,
                cached_tokens=10,
                cost_usd=0.25,
                prompt_token_ids=[1, 2],
                completion_token_ids=[3, 4],
                logprobs=[-0.5, -0.25],
                extra={"reasoning_tokens": 2},
            ),
            llm_call_count=1,
            extra={"reef": {"record_id": "r1"}, "nothing": None},
        ),
        atif.Step(step_id=4, source="agent", message="Done.", is_copied_context=False),
        atif.Step(step_id=5, source="agent", message="", llm_call_count=0),
    ],
    notes="trimmed",
    final_metrics=atif.FinalMetrics(
        total_prompt_tokens=30, total_cost_usd=0.25, total_steps=5, extra={"wall": 3}
    ),
    continued_trajectory_ref="next.json",
    extra={"reef": {"reward": 1.0, "records": [{"id": "r1", "artifact_id": None}]}},
    subagent_trajectories=[
        atif.Trajectory(
            schema_version="ATIF-v1.8",
            trajectory_id="sub",
            agent=atif.Agent(name="helper", version="0"),
            steps=[atif.Step(step_id=1, source="user", message="go")],
        )
    ],
)


def test_a_rich_trajectory_reads_and_writes_back_without_loss() -> None:
    """rule: P-UP-1, P-REND-1."""
    ours = assert_round_trip(RICH)
    # Audio aliases read as ATIF's canonical type, as the reference does.
    assert normal(RICH)["steps"][2]["observation"]["results"][1]["content"][0]["source"][
        "media_type"
    ] == ("audio/mpeg")
    assert ours.steps[2].tool_calls is not None
    assert ours.steps[2].tool_calls[0].arguments == {"path": ".", "flags": [1, {"deep": None}]}
    # Nulls inside free-form JSON (extra, arguments) are content, not absent fields: kept.
    assert trajectory_to_json(ours)["steps"][2]["extra"] == {
        "reef": {"record_id": "r1"},
        "nothing": None,
    }


# -- random trajectories built with the reference models --------------------------------------

texts = st.text(max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=6,
)
extras = st.none() | st.dictionaries(texts, json_values, max_size=3)
maybe_int = st.none() | st.integers(0, 10_000)


@st.composite
def contents(draw: st.DrawFn) -> Any:
    if draw(st.booleans()):
        return draw(texts)
    parts = []
    for _ in range(draw(st.integers(0, 2))):
        kind = draw(st.sampled_from(["text", "image", "audio"]))
        if kind == "text":
            parts.append(atif.ContentPart(type="text", text=draw(texts)))
        elif kind == "image":
            source = atif.ImageSource(media_type="image/webp", path=draw(texts))
            parts.append(atif.ContentPart(type="image", source=source))
        else:
            duration = draw(st.none() | st.floats(0, 100))
            audio = atif.AudioSource(media_type="audio/ogg", path="a", duration_sec=duration)
            parts.append(atif.ContentPart(type="audio", source=audio))
    return parts


@st.composite
def steps(draw: st.DrawFn, step_id: int) -> atif.Step:
    source = draw(st.sampled_from(["system", "user", "agent"]))
    agent_fields: dict[str, Any] = {}
    observation = None
    if source == "agent":
        calls = [
            atif.ToolCall(
                tool_call_id=f"c{step_id}-{n}",
                function_name=draw(texts),
                arguments=draw(st.dictionaries(texts, json_values, max_size=2)),
                extra=draw(extras),
            )
            for n in range(draw(st.integers(0, 2)))
        ]
        agent_fields = {
            "model_name": draw(st.none() | texts),
            "reasoning_effort": draw(st.none() | texts | st.floats(0, 1)),
            "reasoning_content": draw(st.none() | texts),
            "tool_calls": calls or None,
            "metrics": draw(
                st.none()
                | st.builds(
                    atif.Metrics,
                    prompt_tokens=maybe_int,
                    completion_tokens=maybe_int,
                    cost_usd=st.none() | st.floats(0, 10),
                    completion_token_ids=st.none() | st.lists(st.integers(0, 99), max_size=3),
                    logprobs=st.none() | st.lists(st.floats(-10, 0), max_size=3),
                    extra=extras,
                )
            ),
            "llm_call_count": draw(st.none() | st.integers(1, 3)),
        }
        results = [
            atif.ObservationResult(
                source_call_id=draw(st.none() | st.sampled_from([c.tool_call_id for c in calls]))
                if calls
                else None,
                content=draw(st.none() | contents()),
                extra=draw(extras),
            )
            for _ in range(draw(st.integers(0, 2)))
        ]
        observation = atif.Observation(results=results) if draw(st.booleans()) else None
    return atif.Step(
        step_id=step_id,
        source=source,
        message=draw(contents()),
        timestamp=draw(st.none() | st.just("2025-01-02T03:04:05+00:00")),
        observation=observation,
        extra=draw(extras),
        is_copied_context=draw(st.none() | st.booleans()),
        **agent_fields,
    )


@st.composite
def trajectories(draw: st.DrawFn) -> atif.Trajectory:
    count = draw(st.integers(0, 4))
    return atif.Trajectory(
        schema_version="ATIF-v1.8",
        session_id=draw(st.none() | texts),
        trajectory_id=draw(st.none() | texts),
        agent=atif.Agent(
            name=draw(texts),
            version=draw(texts),
            model_name=draw(st.none() | texts),
            tool_definitions=draw(
                st.none() | st.lists(st.dictionaries(texts, json_values, max_size=2), max_size=2)
            ),
            extra=draw(extras),
        ),
        steps=[draw(steps(i)) for i in range(1, count + 1)],
        notes=draw(st.none() | texts),
        final_metrics=draw(
            st.none()
            | st.builds(atif.FinalMetrics, total_steps=maybe_int, total_cached_tokens=maybe_int)
        ),
        extra=draw(extras),
    )


@settings(max_examples=150)
@given(trajectories())
def test_trajectories_of_the_reference_package_round_trip(trajectory: atif.Trajectory) -> None:
    """rule: P-UP-1; any valid ATIF trajectory is read and written back unchanged."""
    assert_round_trip(trajectory)


# -- refusals ---------------------------------------------------------------------------------

BASE = normal(RICH)


def with_step(index: int, **changes: Any) -> dict[str, Any]:
    body = json.loads(json.dumps(BASE))
    body["steps"][index].update(changes)
    return body


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, "required field missing @ $.schema_version"),
        ({**BASE, "surprise": 1}, "unknown key(s): surprise @ $"),
        (with_step(1, step_id=7), "steps[1].step_id is 7, expected 2"),
        (with_step(0, source="robot"), "expected one of 'system', 'user', 'agent'"),
        (
            with_step(0, reasoning_content="x"),
            "only valid on an agent step, not 'system' @ $.steps[0]",
        ),
        (with_step(0, message=3), "expected text or a list of content parts @ $.steps[0].message"),
        (with_step(0, timestamp="yesterday"), "ISO 8601"),
        (with_step(1, message=[{"type": "text"}]), "@ $.steps[1].message[0]"),
        ({**BASE, "agent": {"name": 1, "version": "1"}}, "expected str, got int @ $.agent.name"),
        (
            with_step(2, observation={"results": [{"source_call_id": "t9"}]}),
            "'t9' answers no tool call of step 3 @ $.steps[2]",
        ),
        (
            with_step(2, llm_call_count=0),
            "llm_call_count 0 has no metrics or reasoning @ $.steps[2]",
        ),
        (
            {**BASE, "subagent_trajectories": [{**BASE["subagent_trajectories"][0]}] * 2},
            "duplicate 'sub'",
        ),
        ("not a trajectory", "must be a JSON object @ $"),
    ],
)
def test_what_is_not_atif_is_refused_with_path_and_reason(body: Any, expected: str) -> None:
    """Each refusal is one the reference package makes too, and it names where."""
    with pytest.raises(AtifFormatError) as caught:
        trajectory_from_json(body)
    assert expected in str(caught.value)
    if isinstance(body, dict) and body:
        with pytest.raises(pydantic.ValidationError):
            atif.Trajectory.model_validate(body)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (with_step(0, step_id=True), "expected int, got a boolean @ $.steps[0].step_id"),
        (
            {**BASE, "final_metrics": {"total_cost_usd": float("nan")}},
            "finite number, got nan @ $.final_metrics.total_cost_usd",
        ),
    ],
)
def test_reef_is_stricter_than_the_reference_on_json_types(body: Any, expected: str) -> None:
    """The reference accepts ``true`` as a step id and NaN as a cost (pydantic's lax mode);
    neither is JSON a writer meant, and NaN cannot be written back as JSON: Reef refuses both."""
    atif.Trajectory.model_validate(body)
    with pytest.raises(AtifFormatError, match=expected.replace("$", r"\$").replace("[", r"\[")):
        trajectory_from_json(body)
