"""Harness evolution's stages: traces of every report, one-sample jobs, instructions read."""

from __future__ import annotations

import pytest

from reef.core.job_data import TaskSample, TrainingInstruction, TrajectorySample
from reef.core.plugins import PluginConfigError
from reef.recipe.harness import HarnessRecipe
from reef.record2sample.traces import TraceSamples
from reef.sample2job.traces import TraceJobData, TrainTaskJobData
from reef.storage import Database
from reef.testing import pipeline_context, training_pipeline
from reef.testing.records import call, report


# rule: P-SIZE-3
def test_harness_stages_default_job_samples_to_one() -> None:
    context = pipeline_context()
    stage = TraceSamples(context)
    for job_data in (TraceJobData, TrainTaskJobData):
        built = job_data.from_config(None, context=context, record2sample=stage, environ={})
        assert (built.job_samples, built.buffer_size) == (1, 1)
        assert built.reads_instructions


# rule: P-LAYOUT-6
def test_the_harness_recipe_has_no_max_score_and_every_report_is_a_trace(
    storage_database: Database,
) -> None:
    assert HarnessRecipe.pipeline_spec().record2sample == "TraceSamples"
    with pytest.raises(PluginConfigError, match="unknown key 'max_score'"):
        HarnessRecipe.Settings.parse({"max_score": 0.5}, plugin_class=HarnessRecipe)
    with pytest.raises(PluginConfigError, match="max_score"):
        TraceSamples.Settings.parse({"max_score": 0.5}, plugin_class=TraceSamples)
    context = pipeline_context(has_runtime_loader=False)
    stage = TraceSamples(context)
    jobs = TraceJobData(context, job_samples=1, buffer_size=10)
    pipeline = training_pipeline(stage, jobs, storage_database)
    pipeline.push_many(
        [
            call("w1", session="win"),
            report("won", "w1", score=1.0),
            call("l1", session="lose"),
            report("lost", "l1", score=0.0),
            call("n1", session="none"),
            report("unscored", "n1", score=None),
        ]
    )
    buffer = pipeline.buffer()
    assert [s.report_id for s in buffer if isinstance(s, TrajectorySample)] == [
        "won",
        "lost",
        "unscored",
    ]


# rule: P-MODE-6
def test_a_harness_instruction_runs_at_once_with_an_empty_manual_buffer(
    storage_database: Database,
) -> None:
    context = pipeline_context(training_mode="manual")
    stage = TraceSamples(context)
    pipeline = training_pipeline(stage, TraceJobData(context, job_samples=1), storage_database)
    instruction = TrainingInstruction("r1", text="make the agent cite its sources")
    pipeline.queue_instructions([instruction])
    assert pipeline.ready(1)
    data = pipeline.build_job_data(1)
    assert data is not None
    assert data.samples == ()
    assert data.request == instruction


def test_train_task_jobs_take_tasks_and_refuse_traces() -> None:
    context = pipeline_context()
    jobs = TrainTaskJobData(context, job_samples=1)
    task = TaskSample("t1", {"name": "t1"}, sample_id="t1")
    assert jobs.make_job_data([task], "s:data:1").samples == (task,)
    assert jobs.accepts_imported_tasks
    with pytest.raises(ValueError, match="takes task samples"):
        jobs.make_job_data([TrajectorySample({"steps": []}, sample_id="x")], "s:data:2")
