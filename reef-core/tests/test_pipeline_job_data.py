"""Job data values: samples of one kind, job outcomes, stored sample bodies."""

from __future__ import annotations

import pytest

from reef.core.job_data import (
    JobData,
    JobOutcome,
    SampleFormatError,
    TaskSample,
    TrajectorySample,
    job_data_to_json,
    sample_body,
    sample_from_body,
)


def _trajectory(*artifacts: str | None) -> dict[str, object]:
    records = [{"id": f"c{n}", "artifact_id": a} for n, a in enumerate(artifacts)]
    steps = [{"step_id": 1, "source": "user", "message": "hi"}]
    return {"schema_version": "ATIF-v1.8", "steps": steps, "extra": {"reef": {"records": records}}}


def test_artifact_id_is_the_last_calls() -> None:
    """rule: P-STALE-4 TrajectorySample.artifact_id reads the artifact of its last call."""
    assert TrajectorySample(_trajectory("a1", "a2")).artifact_id == "a2"
    assert TrajectorySample(_trajectory("a1", None)).artifact_id is None
    assert TrajectorySample(_trajectory()).artifact_id is None


def test_job_data_holds_samples_of_one_kind() -> None:
    """rule: P-STG-2 the buffer, and so one job's data, holds samples of one kind."""
    trajectory = TrajectorySample(_trajectory("a"))
    task = TaskSample("t1", {"instruction": "do"})
    assert JobData("s:data:1", (trajectory, trajectory)).kind == "trajectory"
    with pytest.raises(ValueError, match="mixes sample kinds"):
        JobData("s:data:1", (trajectory, task))


def test_grouped_recipes_set_group_id_on_each_member() -> None:
    """rule: P-STG-3 grouped recipes set group_id on each member."""
    samples = [TrajectorySample(_trajectory("a"), group_id="g") for _ in range(2)]
    data = JobData("s:data:1", samples)
    assert data.group_ids == ("g", "g")
    assert [s["group_id"] for s in job_data_to_json(data)["samples"]] == ["g", "g"]


def test_job_outcome_error_exactly_when_failed() -> None:
    """rule: P-PIPE-12 JobOutcome's error is set exactly when the job failed."""
    JobOutcome("j", "c", "finished", {"loss": 1.0})
    JobOutcome("j", "c", "failed", error="boom")
    with pytest.raises(ValueError, match="exactly when"):
        JobOutcome("j", "c", "failed")
    with pytest.raises(ValueError, match="exactly when"):
        JobOutcome("j", "c", "finished", error="boom")
    with pytest.raises(ValueError, match="unknown event"):
        JobOutcome("j", "c", "done")  # type: ignore[arg-type]


def test_sample_body_round_trips_without_store_columns() -> None:
    sample = TrajectorySample(
        _trajectory("a"), reward=0.5, source_record_ids=("r1",), report_id="rep", sample_id="x"
    )
    body = sample_body(sample)
    assert "sample_id" not in body
    assert "kind" not in body
    back = sample_from_body("trajectory", body, sample_id="x", group_id="g")
    assert back == TrajectorySample(
        _trajectory("a"),
        reward=0.5,
        source_record_ids=("r1",),
        report_id="rep",
        sample_id="x",
        group_id="g",
    )
    task = TaskSample("t", {"a": 1})
    assert sample_from_body("task", sample_body(task)) == task
    with pytest.raises(SampleFormatError, match="unknown kind"):
        sample_from_body("image", {})
    with pytest.raises(SampleFormatError, match="'bad'"):
        sample_from_body("trajectory", {"nope": 1}, sample_id="bad")
    with pytest.raises(ValueError, match="finite"):
        TrajectorySample(_trajectory(), reward=float("nan"))
