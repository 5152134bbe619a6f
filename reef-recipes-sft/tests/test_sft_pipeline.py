"""SFT through the TrainingPipeline: reports and uploads become samples, job data, commits.

Runs on the real sample store (``reef.testing.storage``: SQLite, and PostgreSQL when
``REEF_TEST_DATABASE_URL`` names one), with ``reef.testing``'s pipeline helpers.
"""

from __future__ import annotations

from typing import Any

import pytest

from reef import InferenceRecord, PluginConfigError, RecipeConfigError, Report, TrajectorySample
from reef.testing import (
    Database,
    TrainingPipeline,
    add_upload,
    pipeline_context,
    sample_store,
    training_pipeline,
)
from reef_sft.processor import SFTJobData, SFTSamples

CONTEXT = pipeline_context("s", "c")
AGENT_TRAJECTORY = {
    "schema_version": "ATIF-v1.4",
    "session_id": "up-1",
    "agent": {"name": "a", "version": "1"},
    "steps": [
        {"step_id": 1, "source": "user", "message": "hi"},
        {"step_id": 2, "source": "agent", "message": "hello"},
    ],
}
NO_AGENT_TRAJECTORY = {
    **AGENT_TRAJECTORY,
    "session_id": "up-2",
    "steps": [AGENT_TRAJECTORY["steps"][0]],
}


def call(cid: str, artifact: str) -> InferenceRecord:
    return InferenceRecord(
        cid,
        "s",
        {"messages": [{"role": "user", "content": f"question {cid}"}]},
        {
            "choices": [
                {"message": {"role": "assistant", "content": "answer"}, "finish_reason": "stop"}
            ]
        },
        artifact_id=artifact,
    )


def pipeline(database: Database, **config: Any) -> TrainingPipeline:
    environ: dict[str, str] = {}
    r2s = SFTSamples.from_config(config or None, context=CONTEXT, environ=environ)
    s2j = SFTJobData.from_config(
        {"job_samples": 2}, context=CONTEXT, record2sample=r2s, environ=environ
    )
    return training_pipeline(r2s, s2j, database)


def test_uploaded_sample_refuses_no_agent_turn_and_adds_max_tokens() -> None:
    """rule: P-UP-4 SFTSamples refuses a trajectory with no agent turn (ValueError naming it)
    and adds extra.reef.max_tokens; it is pure."""
    stage = SFTSamples(CONTEXT, max_tokens=512)
    with pytest.raises(ValueError, match="'up-2' has no agent turn"):
        stage.uploaded_sample(NO_AGENT_TRAJECTORY)
    before = repr(AGENT_TRAJECTORY)
    sample = stage.uploaded_sample(AGENT_TRAJECTORY)
    assert sample == stage.uploaded_sample(AGENT_TRAJECTORY)
    assert repr(AGENT_TRAJECTORY) == before  # the input is not changed
    assert isinstance(sample, TrajectorySample)
    assert sample.trajectory["extra"]["reef"]["max_tokens"] == 512
    copied = {
        **AGENT_TRAJECTORY,
        "steps": [{**AGENT_TRAJECTORY["steps"][1], "is_copied_context": True}],
    }
    with pytest.raises(ValueError, match="no agent turn"):
        stage.uploaded_sample(copied)


def test_max_staleness_is_refused_and_nothing_is_stale(storage_database: Database) -> None:
    """rule: P-STALE-12 SFTSamples refuses max_staleness; is_stale is False, so samples of an
    artifact long gone still train."""
    with pytest.raises(PluginConfigError) as info:
        SFTSamples.from_config({"max_staleness": 0}, context=CONTEXT, environ={})
    assert info.value.key == "$.max_staleness"
    sft = pipeline(storage_database)
    sft.observe_serving_artifact_id("old")
    sft.push(call("c1", "old"))
    sft.push(Report("r1", "s", ("c1",)))
    sft.observe_serving_artifact_id("new")
    sft.observe_serving_artifact_id("newer")
    assert [s.sample_id for s in sft.buffer()] == ["r1:0"]


def test_reports_and_uploads_train_through_the_pipeline(storage_database: Database) -> None:
    """rule: P-UP-3 P-UP-6 P-UP-7 P-UP-8 P-UP-9 P-PIPE-9 P-REND-4 a report's trajectory and a
    checked upload train in one job with max_tokens and no reward; a refused upload is skipped
    and stays unconsumed."""
    sft = pipeline(storage_database, max_tokens=256)
    store = sample_store(storage_database, "s")
    add_upload(storage_database, "s", "up-2", NO_AGENT_TRAJECTORY)
    sft.push(call("c1", "a1"))
    sft.push(Report("r1", "s", ("c1",), score=None))
    assert not sft.ready(2)
    add_upload(storage_database, "s", "up-1", AGENT_TRAJECTORY)
    data = sft.build_job_data(2)
    assert data is not None
    assert data.metadata == {"objective": "cross_entropy"}
    assert [s.sample_id for s in data.samples] == ["r1:0", "up-1"]
    for sample in data.samples:
        assert isinstance(sample, TrajectorySample)
        assert sample.trajectory["extra"]["reef"]["max_tokens"] == 256
        assert sample.reward is None
    assert sft.acknowledge(data.id) == ("sample:r1:0", "sample:up-1")
    assert store.train_counts("c", ["r1:0", "up-1", "up-2"]) == {"r1:0": 1, "up-1": 1, "up-2": 0}
    assert [s.id for s in store.untrained("c")] == ["up-2"]
    assert sft.status()["refused_samples"] == 1


def test_job_samples_is_required() -> None:
    """rule: P-SIZE-2 a weight recipe's job data has no default job_samples: RecipeConfigError."""
    with pytest.raises(RecipeConfigError):
        SFTJobData.from_config({}, context=CONTEXT, record2sample=SFTSamples(CONTEXT), environ={})


def test_buffer_size_below_job_samples_is_refused() -> None:
    """rule: P-BUF-6 buffer_size defaults to job_samples and is refused below it."""
    r2s = SFTSamples(CONTEXT)
    stage = SFTJobData.from_config(
        {"job_samples": 3}, context=CONTEXT, record2sample=r2s, environ={}
    )
    assert stage.buffer_size == 3
    with pytest.raises(PluginConfigError, match="smaller than job_samples"):
        SFTJobData.from_config(
            {"job_samples": 3, "buffer_size": 2}, context=CONTEXT, record2sample=r2s, environ={}
        )
