"""Records: a stable JSON form, abort detection, and refusals that say where and why.

rule: P-SET-13 (a record holds the provider exchange and no training tensors);
docs/decisions.md#engine-abort (engine abort: a choice finished with ``abort``, or Reef's
aborted mark).
"""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given, settings, strategies as st

from reef.core.records import (
    CHAT_COMPLETIONS,
    InferenceRecord,
    JudgedRecord,
    Judgment,
    RecordFormatError,
    Report,
    dumps,
    from_json,
    loads,
    to_json,
)

texts = st.text(max_size=10)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(texts, json_values, max_size=4)
times = st.floats(0, 2e9)
tag_names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=8)

inference_records = st.builds(
    InferenceRecord,
    id=texts,
    scenario=texts,
    request=json_objects,
    response=st.none() | json_objects,
    api_format=st.sampled_from([CHAT_COMPLETIONS, "openai.responses"]),
    artifact_id=st.none() | texts,
    tags=st.dictionaries(tag_names, texts, max_size=3),
    started_at=times,
    ended_at=times,
    aborted=st.booleans(),
)
reports = st.builds(
    Report,
    id=texts,
    scenario=texts,
    references=st.lists(texts, min_size=1, max_size=3).map(tuple),
    score=st.none() | st.floats(allow_nan=False, allow_infinity=False),
    feedback=st.none() | texts,
    metadata=json_objects,
    created_at=times,
)
judged_records = st.builds(
    JudgedRecord,
    id=texts,
    scenario=texts,
    record_id=texts,
    judgment=st.builds(
        Judgment,
        score=st.none() | st.floats(allow_nan=False),
        feedback=st.none() | texts,
        metadata=json_objects,
    ),
    judged_at=times,
)
records = inference_records | reports | judged_records


@settings(max_examples=200)
@given(records)
def test_every_record_survives_its_json_form(record: Any) -> None:
    """rule: P-SET-13; the stable JSON form reads back to an equal record, through text too."""
    body = to_json(record)
    assert body["kind"] == record.kind
    assert from_json(body) == record
    text = dumps(record)
    assert loads(text) == record
    assert json.loads(text) == json.loads(json.dumps(body))
    # Stable: the text depends only on the value, not on how its dicts were built.
    assert dumps(from_json(json.loads(text))) == text


def test_canonical_text_does_not_depend_on_key_order() -> None:
    a = InferenceRecord("r", "s", {"messages": [], "model": "m"}, {"b": 1, "a": 2})
    b = InferenceRecord("r", "s", {"model": "m", "messages": []}, {"a": 2, "b": 1})
    assert dumps(a) == dumps(b)
    assert dumps(a) == (
        '{"aborted":false,"api_format":"openai.chat.completions","artifact_id":null,'
        '"ended_at":0.0,"id":"r","kind":"inference","request":{"messages":[],"model":"m"},'
        '"response":{"a":2,"b":1},"scenario":"s","started_at":0.0,"tags":{}}'
    )


def choice(finish_reason: str | None) -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": "x"}, "finish_reason": finish_reason}


@pytest.mark.parametrize(
    ("response", "aborted", "expected"),
    [
        ({"choices": [choice("stop")]}, False, False),
        ({"choices": [choice("stop"), choice("abort")]}, False, True),
        ({"choices": [choice("length")]}, True, True),
        (None, True, True),
        (None, False, False),
        ({"choices": [choice(None)]}, False, False),
        ({"error": "engine died"}, False, False),
    ],
)
def test_engine_abort_is_the_mark_or_an_abort_finish_reason(
    response: Any, aborted: bool, expected: bool
) -> None:
    """rule: P-SET-10, P-SET-11; docs/decisions.md#engine-abort: the stored response never
    changes."""
    record = InferenceRecord("r", "s", {"messages": []}, response, aborted=aborted)
    before = json.dumps(response)
    assert record.is_engine_abort is expected
    assert json.dumps(record.response) == before
    assert from_json(to_json(record)).is_engine_abort is expected


def test_record_views_of_the_request_and_response() -> None:
    record = InferenceRecord(
        "r",
        "s",
        {"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]},
        {"choices": [choice("stop"), {"finish_reason": "stop"}, "junk"]},
    )
    assert record.messages == [{"role": "user", "content": "hi"}]
    assert record.tools == [{"type": "function"}]
    assert record.reply_messages == [{"role": "assistant", "content": "x"}]
    odd = InferenceRecord("r", "s", {"messages": "no", "tools": None}, None)
    assert (odd.messages, odd.tools, odd.reply_messages) == ([], [], [])


def test_tags_are_lower_case_names_with_text_values() -> None:
    record = InferenceRecord("r", "s", {}, None, tags={"session": "42", "agent-name": "x"})
    assert to_json(record)["tags"] == {"session": "42", "agent-name": "x"}
    for bad in ({"Session": "42"}, {"": "x"}, {"n": 3}):
        with pytest.raises(ValueError, match="tag"):
            InferenceRecord("r", "s", {}, None, tags=bad)  # type: ignore[arg-type]


def test_report_needs_references_and_a_finite_score() -> None:
    with pytest.raises(ValueError, match="at least one inference record"):
        Report("p", "s", references=())
    for score in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite"):
            Report("p", "s", references=("r",), score=score)
    assert Report("p", "s", references=("r",)).score is None


def test_a_report_retried_with_the_same_content_has_the_same_key() -> None:
    first = Report("p", "s", references=("r",), score=1.0, created_at=1.0)
    again = attrs.evolve(first, created_at=2.0)
    changed = attrs.evolve(first, score=0.5)
    assert first.content_key() == again.content_key()
    assert first.content_key() != changed.content_key()


BASE = to_json(Report("p", "s", references=("r1", "r2"), score=1.0))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ([], "a record must be a JSON object"),
        ({**BASE, "kind": "memo"}, "unknown record kind 'memo'"),
        ({**BASE, "kind": "memo"}, "@ $.kind"),
        ({**BASE, "colour": "red"}, "unknown key 'colour' for a report record @ $.colour"),
        ({k: v for k, v in BASE.items() if k != "id"}, "required field missing @ $.id"),
        ({**BASE, "references": []}, "at least one inference record"),
        ({**BASE, "score": "high"}, "@ $.score"),
        ({**BASE, "score": float("nan")}, "finite"),
        (
            to_json(InferenceRecord("r", "s", {}, None)) | {"tags": {"A": "b"}},
            "lower-case",
        ),
        (
            to_json(JudgedRecord("j", "s", "r", Judgment())) | {"judgment": {"score": "x"}},
            "@ $.judgment.score",
        ),
    ],
)
def test_bad_bodies_are_refused_with_path_and_reason(body: Any, expected: str) -> None:
    with pytest.raises(RecordFormatError) as caught:
        from_json(body)
    assert expected in str(caught.value)
