"""The check of job data against its stage's ``output_schema`` (P-PIPE-7): what
:func:`reef.sample2job.validate_job_data` reports, and a real :class:`Trainer` thread refusing
data that fails it (on SQLite, and PostgreSQL with REEF_TEST_DATABASE_URL)."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from reef.core.job_data import (
    JobData,
    Sample,
    TrajectorySample,
    job_data_schema,
    sample_body,
)
from reef.core.records import JSON
from reef.pipeline_context import PipelineContext
from reef.record2sample.no_samples import NoSamples
from reef.sample2job import JobDataError, Sample2Job, validate_job_data
from reef.storage import Database, NewSample, ScenarioSettings, TrainerSamples
from reef.storage.scenario_settings import snapshot_key
from reef.testing.components import RecordingComponent
from reef.train.pipeline import TrainingPipeline
from reef.train.trainer import Trainer, TrainerParts, TrainerSettings

CONTEXT = PipelineContext("s", "c")


class CountedJobData(Sample2Job):
    """A stage whose schema also requires ``metadata.objective``, and whose job data lacks it
    (a recipe's bug); it tells the test when it built its second job data."""

    def __init__(self, context: PipelineContext) -> None:
        super().__init__(context, job_samples=2)
        self.built: list[str] = []
        self.built_twice = threading.Event()

    @property
    def output_schema(self) -> JSON:
        schema = job_data_schema()
        schema["properties"]["metadata"] = {"type": "object", "required": ["objective"]}
        return schema

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        self.built.append(data_id)
        if len(self.built) == 2:
            self.built_twice.set()
        return JobData(data_id, tuple(samples))


def test_a_problem_is_named_by_data_stage_path_and_reason() -> None:
    """rule: P-PIPE-7 the check names the job data, the stage whose schema it failed, the path
    of the problem in the job data's JSON form and what is wrong there; inside a sample, the
    problem of the sample's own kind, not a dump of the sample."""
    stage = CountedJobData(CONTEXT)
    sample = TrajectorySample({"steps": []}, reward=1.0, sample_id="a:0")
    validate_job_data(job_data_schema(), JobData("d1", (sample,)))  # the base schema: valid
    with pytest.raises(JobDataError) as info:
        validate_job_data(stage, JobData("d1", (sample,)))
    assert (info.value.data_id, info.value.stage) == ("d1", "CountedJobData")
    assert (info.value.path, info.value.reason) == (
        "$.metadata",
        "'objective' is a required property",
    )
    assert str(info.value) == (
        "job data 'd1' does not match the output_schema of CountedJobData:"
        " 'objective' is a required property @ $.metadata"
    )

    unread = TrajectorySample({"steps": []}, reward=1.0)  # never stored: no sample id
    with pytest.raises(JobDataError) as info:
        validate_job_data(job_data_schema(), JobData("d2", (sample, unread)))
    assert info.value.stage is None
    assert (info.value.path, info.value.reason) == (
        "$.samples[1].sample_id",
        "None is not of type 'string'",
    )
    no_steps = TrajectorySample({"turns": []}, sample_id="a:1")
    with pytest.raises(JobDataError) as info:
        validate_job_data(stage, JobData("d3", (no_steps,), metadata={"objective": "x"}))
    assert (info.value.path, info.value.reason) == (
        "$.samples[0].body.trajectory",
        "'steps' is a required property",
    )


def test_the_trainer_submits_no_job_data_that_fails_the_check(
    storage_database: Database,
) -> None:
    """rule: P-PIPE-7 P-PIPE-8 job data that fails its stage's schema is never submitted: the
    trainer releases it (its samples stay untrained, and the next step builds it again) and
    shows the problem in its status snapshot."""
    samples = TrainerSamples(storage_database, "s")
    samples.register_trainer("c", reads_uploads=False)
    unit = [
        NewSample(f"g-{i}", "trajectory", sample_body(TrajectorySample({"steps": []})))
        for i in range(2)
    ]
    samples.add_record_samples("c", unit, ["record-g"])
    component = RecordingComponent()  # must never be given a job
    stages: list[CountedJobData] = []
    built = threading.Event()

    def build(database: Database) -> TrainerParts:
        stage = CountedJobData(CONTEXT)
        stages.append(stage)
        built.set()
        store = TrainerSamples(database, "s")
        pipeline = TrainingPipeline(NoSamples(CONTEXT), stage, samples=store, context=CONTEXT)
        return TrainerParts(pipeline, component)  # type: ignore[arg-type]

    settings = TrainerSettings(poll_interval=0.05)
    trainer = Trainer("s", "c", database=storage_database, build=build, settings=settings)
    trainer.start()
    try:
        assert built.wait(30)  # the trainer took its lease and built its parts
        assert stages[0].built_twice.wait(30)
    finally:
        trainer.stop(30)
    first, second = stages[0].built[:2]
    assert first == second  # released, never committed: built again under the same id
    assert component.submitted == []
    assert [s.id for s in samples.untrained("c")] == ["g-0", "g-1"]
    snapshot = ScenarioSettings(storage_database, "s").get(snapshot_key("c"))
    (error, *_) = snapshot["last_errors"]
    assert error["where"] == "before_submit"
    assert error["error"] == (
        f"reef.sample2job.validation.JobDataError: job data {first!r} does not match the"
        " output_schema of CountedJobData: 'objective' is a required property @ $.metadata"
    )
