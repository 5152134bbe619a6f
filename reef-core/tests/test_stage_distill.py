"""The shared distilling stages: DistillSamples and DistillJobData (P-LAYOUT-3, P-REND-4)."""

from __future__ import annotations

from typing import Any

import pytest

from reef import (
    DistillJobData,
    DistillSamples,
    PluginConfigError,
    ReportError,
    TrajectorySample,
    compose_teacher_request,
    with_teacher,
)
from reef.embed import Plugins
from reef.plugins import PluginKind
from reef.testing import pipeline_context
from reef.testing.records import call, report

CTX = pipeline_context()


def _sample(stage: DistillSamples, *records: Any) -> TrajectorySample:
    for record in records:
        stage.push(record)
    (unit,) = stage.ready_units()
    ((_, (sample,)),) = stage.unit_samples(unit)
    assert isinstance(sample, TrajectorySample)
    return sample


def _teacher(sample: TrajectorySample) -> dict[str, Any]:
    teacher: dict[str, Any] = sample.trajectory["extra"]["reef"]["teacher"]
    return teacher


def test_the_sample_is_the_students_call_with_a_teacher_request() -> None:
    # rule: P-LAYOUT-3 P-REND-4
    stage = DistillSamples(CTX, teacher_max_tokens=256)
    sample = _sample(
        stage,
        call("c1", 1),
        call("c2", 2),
        report("r", "c2", score=None, teacher_context="The answer is a2."),
    )
    # the student's call: only its reply trains, its earlier turns are copied context
    agent_steps = [s for s in sample.trajectory["steps"] if s["source"] == "agent"]
    assert [s.get("is_copied_context") for s in agent_steps] == [True, None]
    assert sample.reward is None
    assert sample.report_id == "r"
    recorded = call("c2", 2).request["messages"]
    teacher = _teacher(sample)
    assert teacher["max_tokens"] == 256
    assert teacher["messages"][:-1] == recorded[:-1]
    assert teacher["messages"][-1] == {"role": "user", "content": "q2\n\nThe answer is a2."}


def test_a_teacher_request_override_replaces_the_composed_one() -> None:
    # rule: P-LAYOUT-3
    override = {"messages": [{"role": "user", "content": "solve q1 knowing a1"}]}
    sample = _sample(
        DistillSamples(CTX),
        call("c1", 1),
        report("r", "c1", teacher_context="ignored", teacher_request=override),
    )
    assert _teacher(sample) == override
    plain = _sample(DistillSamples(CTX), call("d1", 1, session="b"), report("r2", "d1"))
    assert _teacher(plain) == {"messages": call("d1", 1, session="b").request["messages"]}
    assert plain.reward == 1.0  # the report's score, for an objective that trains it


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ({"teacher_context": ["a"]}, "teacher_context must be text"),
        ({"teacher_request": "ask"}, "teacher_request must be a request object"),
    ],
)
def test_a_malformed_teacher_field_fails_the_report(metadata: dict[str, Any], message: str) -> None:
    # rule: P-REP-14 a training data error raises; the report stays unprocessed
    stage = DistillSamples(CTX)
    stage.push(call("c1", 1))
    with pytest.raises(ReportError, match=message):
        stage.push(report("r", "c1", **metadata))
    assert stage.ready_units() == ()


def test_compose_keeps_the_prompt_and_drops_sampling() -> None:
    request = {
        "model": "student",
        "temperature": 0.7,
        "max_tokens": 16,
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "chat_template_kwargs": {"enable_thinking": False},
        "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}],
    }
    composed = compose_teacher_request(request, context="hint")
    assert set(composed) == {"messages", "tools", "chat_template_kwargs"}
    assert composed["messages"][0]["content"][-1] == {"type": "text", "text": "\n\nhint"}
    assert request["messages"][0]["content"] == [{"type": "text", "text": "q"}]  # not mutated
    system_only = compose_teacher_request(
        {"messages": [{"role": "system", "content": "s"}]}, context="hint"
    )
    assert system_only["messages"][-1] == {"role": "user", "content": "hint"}


def test_with_teacher_writes_both_keys_and_keeps_the_rest() -> None:
    sample = TrajectorySample({"steps": [], "extra": {"reef": {"records": [{"id": "c"}]}}})
    teacher = {"messages": [{"role": "user", "content": "q"}]}
    written = with_teacher(sample, teacher=teacher, candidates=[teacher, {}])
    assert written.trajectory["extra"]["reef"] == {
        "records": [{"id": "c"}],
        "teacher": teacher,
        "teacher_candidates": [teacher, {}],
    }
    assert sample.trajectory["extra"]["reef"] == {"records": [{"id": "c"}]}


def test_the_stages_are_registered_and_configured() -> None:
    # rule: P-STG-10 P-SIZE-2
    plugins = Plugins(blocked=())
    plugins.load()
    assert plugins.resolve(PluginKind.RECORD2SAMPLE, "DistillSamples") is DistillSamples
    assert plugins.resolve(PluginKind.SAMPLE2JOB, "DistillJobData") is DistillJobData
    stage = DistillSamples.from_config(
        {"teacher_max_tokens": 64, "max_staleness": 1}, context=CTX, environ={}
    )
    assert stage.teacher_max_tokens == 64
    assert stage.max_staleness == 1
    with pytest.raises(PluginConfigError, match="teacher_max_tokens"):
        DistillSamples.from_config({"teacher_max_tokens": 0}, context=CTX, environ={})
    jobs = DistillJobData.from_config(
        {"job_samples": 2}, context=CTX, record2sample=stage, environ={}
    )
    samples = [TrajectorySample({"steps": []}, reward=1.0)] * 2
    data = jobs.make_job_data(samples, "s:data:1")
    assert data.samples == tuple(samples)
    assert data.id == "s:data:1"
