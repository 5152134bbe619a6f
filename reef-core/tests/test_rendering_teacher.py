"""Rendering a distillation sample's teacher sequence (reef.core.teacher_rendering)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st

pytest.importorskip("jinja2")

from reef.components.local.byte_tokenizer import ByteTokenizer
from reef.core.chat_rendering import ChatRenderer, RenderedSample, RenderError
from reef.core.teacher_rendering import (
    render_teacher,
    sample_teacher,
    sample_teacher_candidates,
    trained_tokens,
)

RENDERER = ChatRenderer(ByteTokenizer())


def student_trajectory(question: str, answer: str, *, earlier: bool = False) -> dict[str, Any]:
    """A last-call sample: ``question`` answered with ``answer`` (after a copied first turn)."""
    steps: list[dict[str, Any]] = [{"step_id": 1, "source": "user", "message": "hi"}]
    if earlier:
        steps += [
            {"step_id": 2, "source": "agent", "message": "hello", "is_copied_context": True},
        ]
    steps += [
        {"step_id": len(steps) + 1, "source": "user", "message": question},
        {"step_id": len(steps) + 2, "source": "agent", "message": answer},
    ]
    return {"schema_version": "ATIF-v1.8", "agent": {"name": "t", "version": "1"}, "steps": steps}


def render(trajectory: dict[str, Any]) -> RenderedSample:
    return RENDERER.render_sample(trajectory)


def test_teacher_prompt_is_followed_by_the_students_reply_tokens() -> None:
    # rule: P-REND-4
    student = render(student_trajectory("2+3?", "5"))
    teacher = {"messages": [{"role": "user", "content": "2+3? (the answer is 5)"}]}
    rendered = render_teacher(RENDERER, teacher, student)
    (sequence,) = rendered.sequences
    prompt = RENDERER.prompt_ids(teacher)
    assert list(sequence.token_ids[: len(prompt)]) == prompt
    assert list(sequence.token_ids[len(prompt) :]) == trained_tokens(student)
    assert sequence.loss_mask == (0,) * len(prompt) + (1,) * len(trained_tokens(student))


def test_a_request_without_messages_scores_the_students_own_tokens() -> None:
    # rule: P-REND-4
    student = render(student_trajectory("2+3?", "5", earlier=True))
    assert render_teacher(RENDERER, {"model": "teacher"}, student) == student
    assert render_teacher(RENDERER, None, student) == student


@given(
    question=st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=20),
    answer=st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), min_size=1),
    context=st.text(st.characters(codec="ascii", exclude_categories=["Cc"]), max_size=20),
)
def test_the_teachers_marked_tokens_are_the_students_trained_tokens(
    question: str, answer: str, context: str
) -> None:
    # The invariant the objective relies on: teacher log probabilities line up one to one with
    # the student's trained tokens, whatever the teacher's prompt.
    student = render(student_trajectory(question, answer))
    teacher = {
        "messages": [{"role": "system", "content": context}, {"role": "user", "content": question}]
    }
    rendered = render_teacher(RENDERER, teacher, student)
    assert trained_tokens(rendered) == trained_tokens(student)


def test_a_teacher_sequence_longer_than_the_requests_max_tokens_cannot_render() -> None:
    # rule: P-REND-5
    student = render(student_trajectory("2+3?", "5"))
    teacher = {"messages": [{"role": "user", "content": "2+3?"}]}
    length = render_teacher(RENDERER, teacher, student).num_tokens
    assert render_teacher(RENDERER, {**teacher, "max_tokens": length}, student).num_tokens == length
    with pytest.raises(RenderError, match="more than its limit"):
        render_teacher(RENDERER, {**teacher, "max_tokens": length - 1}, student)
    with pytest.raises(RenderError, match="more than its limit"):
        render_teacher(RENDERER, teacher, student, max_tokens=length - 1)


def test_a_teacher_prompt_cannot_precede_several_replies() -> None:
    multi = student_trajectory("2+3?", "5", earlier=True)
    multi["steps"][1]["is_copied_context"] = None
    student = render(multi)
    with pytest.raises(RenderError, match="trains 2"):
        render_teacher(RENDERER, {"messages": [{"role": "user", "content": "q"}]}, student)
    # without a teacher prompt, the student's own tokens still score every reply
    assert render_teacher(RENDERER, {}, student) == student


def test_the_teacher_requests_are_read_from_extra_reef() -> None:
    # rule: P-REND-4
    teacher = {"messages": [{"role": "user", "content": "q"}], "max_tokens": 64}
    trajectory = {
        **student_trajectory("q", "a"),
        "extra": {"reef": {"teacher": teacher, "teacher_candidates": [teacher, {}]}},
    }
    assert sample_teacher(trajectory) == teacher
    assert sample_teacher_candidates(trajectory) == (teacher, {})
    assert sample_teacher(student_trajectory("q", "a")) is None
    assert sample_teacher_candidates(student_trajectory("q", "a")) == ()


@pytest.mark.parametrize(
    ("reef", "message"),
    [
        ({"teacher": "ask the teacher"}, "must be a request object"),
        ({"teacher": {"messages": []}}, "non-empty list"),
        ({"teacher": {"max_tokens": 0}}, "positive int"),
        ({"teacher_candidates": {"messages": []}}, "must be a list"),
        ({"teacher_candidates": [{"max_tokens": True}]}, r"teacher_candidates\[0\].max_tokens"),
    ],
)
def test_a_malformed_teacher_request_is_named(reef: dict[str, Any], message: str) -> None:
    trajectory = {**student_trajectory("q", "a"), "extra": {"reef": reef}}

    def read() -> None:
        sample_teacher(trajectory)
        sample_teacher_candidates(trajectory)

    with pytest.raises(RenderError, match=message):
        read()
