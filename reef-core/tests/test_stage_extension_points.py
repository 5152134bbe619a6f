"""The extension points a recipe overrides, and the helpers its tests use, written the way a
recipe author writes them: from ``reef`` and ``reef.testing`` only."""

from __future__ import annotations

import logging
from collections.abc import Hashable, Sequence
from typing import ClassVar

import attrs
import pytest

from reef import (
    GroupDecision,
    GroupedJobData,
    JobData,
    PipelineContext,
    PluginConfigError,
    PluginSettings,
    Record,
    Record2Sample,
    Record2SampleSettings,
    RecordSet,
    ReportContext,
    ReportError,
    ReportGrouping,
    ReportSamples,
    Sample,
    Sample2Job,
    TrajectorySample,
    config_option,
)
from reef.testing import (
    Database,
    add_upload,
    pipeline_context,
    sample_store,
    training_pipeline,
)
from reef.testing.records import call, report

CONTEXT = pipeline_context()


# -- best of N: members_to_train -------------------------------------------------------------


class BestOfN(ReportGrouping):
    """``n`` rollouts of one prompt (``metadata.prompt``) form a group; the best ``keep`` train."""

    def __init__(self, n: int, keep: int) -> None:
        self.n = n
        self.keep = keep

    def placement(self, context: ReportContext) -> tuple[Hashable | None, str | None]:
        return context.report.metadata.get("prompt"), None

    def decide(self, key: Hashable, members: tuple[ReportContext, ...]) -> GroupDecision:
        return GroupDecision.READY if len(members) >= self.n else GroupDecision.INCOMPLETE

    def members_to_train(
        self, key: Hashable, members: tuple[ReportContext, ...]
    ) -> Sequence[ReportContext]:
        ranked = sorted(members, key=lambda member: member.require_score(), reverse=True)
        return ranked[: self.keep]


def _rollouts(stage: ReportSamples, scores: dict[str, float], prompt: str = "p") -> None:
    for name in scores:
        stage.push(call(f"{name}.c", session=name))
    for name, score in scores.items():
        stage.push(report(name, f"{name}.c", score=score, prompt=prompt))


def test_members_to_train_keeps_the_best_of_a_ready_group() -> None:
    """rule: P-REP-10 P-SET-14 a READY group trains only the members its grouping keeps, as one
    unit in arrival order; every member left out ends with its calls, counted by reason."""
    stage = ReportSamples(CONTEXT, BestOfN(n=4, keep=2))
    _rollouts(stage, {"r1": 0.2, "r2": 0.9, "r3": 0.1, "r4": 0.7})
    (unit,) = stage.ready_units()
    assert [record_set.id for record_set in unit.record_sets] == ["r2", "r4"]
    rewards = [s.reward for _, made in stage.unit_samples(unit) for s in made]  # type: ignore[union-attr]
    assert rewards == [0.9, 0.7]
    assert stage.ended_records() == {
        "r1.c": "left_out_of_group",
        "r1": "left_out_of_group",
        "r3.c": "left_out_of_group",
        "r3": "left_out_of_group",
    }


def test_the_default_keeps_every_member_and_keeping_none_discards_the_group() -> None:
    class KeepNone(BestOfN):
        def members_to_train(
            self, key: Hashable, members: tuple[ReportContext, ...]
        ) -> Sequence[ReportContext]:
            return ()

    every = ReportSamples(CONTEXT, BestOfN(n=2, keep=2))
    _rollouts(every, {"r1": 0.5, "r2": 0.6})
    assert [s.id for unit in every.ready_units() for s in unit.record_sets] == ["r1", "r2"]
    none = ReportSamples(CONTEXT, KeepNone(n=2, keep=0))
    _rollouts(none, {"r1": 0.5, "r2": 0.6})
    assert none.ready_units() == ()
    assert set(none.ended_records().values()) == {"group_discarded"}


def test_keeping_a_report_of_another_group_is_refused() -> None:
    class Stranger(BestOfN):
        def members_to_train(
            self, key: Hashable, members: tuple[ReportContext, ...]
        ) -> Sequence[ReportContext]:
            return (attrs.evolve(members[0], report=report("elsewhere", "r1.c")),)

    stage = ReportSamples(CONTEXT, Stranger(n=2, keep=1))
    with pytest.raises(ReportError, match=r"Stranger.members_to_train kept reports .*: elsewhere"):
        _rollouts(stage, {"r1": 0.5, "r2": 0.6})


# -- a unit of n samples: form_unit --------------------------------------------------------


@attrs.frozen
class GridSettings(Record2SampleSettings):
    steps: int = config_option(default=3, help="samples made from each call")


class Grid(Record2Sample):
    """Each call is a set of its own whose ``steps`` samples train together."""

    Settings: ClassVar[type[PluginSettings]] = GridSettings

    def __init__(self, context: PipelineContext, *, steps: int = 3, max_staleness: int = 0) -> None:
        super().__init__(context, max_staleness=max_staleness)
        self.steps = steps

    def push(self, record: Record) -> None:
        self.form_unit(RecordSet(record.id, (record,)))

    def make_samples(self, record_set: RecordSet) -> Sequence[Sample]:
        (record,) = record_set.inferences
        return [
            TrajectorySample(
                {
                    "steps": [],
                    "extra": {
                        "reef": {"records": [{"id": record.id, "artifact_id": record.artifact_id}]}
                    },
                },
                reward=float(step),
            )
            for step in range(self.steps)
        ]


class GridJobData(Sample2Job):
    """A fixed-unit stage: one job holds at most one grid."""

    default_job_samples: ClassVar[int | None] = 1

    @classmethod
    def max_job_samples_for(cls, record2sample: Record2Sample) -> int | None:
        assert isinstance(record2sample, Grid)
        return record2sample.steps

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        return JobData(data_id, tuple(samples))


def test_the_base_from_config_hands_the_settings_to_the_constructor() -> None:
    """rule: P-STG-10 P-STG-12 a stage that declares Settings needs no from_config: the base
    parses them and passes each key, max_staleness included, to the constructor."""
    grid = Grid.from_config({"steps": 4, "max_staleness": 2}, context=CONTEXT, environ={})
    assert (grid.steps, grid.max_staleness) == (4, 2)
    with pytest.raises(PluginConfigError, match="unknown key 'step', did you mean 'steps'"):
        Grid.from_config({"step": 4}, context=CONTEXT, environ={})


def test_the_base_from_config_forwards_max_job_samples_of_a_fixed_unit_stage() -> None:
    """rule: P-SIZE-4 a stage whose job data is one fixed unit refuses a larger job_samples:
    the base from_config reads the limit from max_job_samples_for(record2sample)."""
    grid = Grid(CONTEXT, steps=4)
    built = GridJobData.from_config(
        {"job_samples": 4}, context=CONTEXT, record2sample=grid, environ={}
    )
    assert (built.job_samples, built.max_job_samples) == (4, 4)
    with pytest.raises(
        PluginConfigError,
        match=r"5 is more than this stage's job data holds \(4\): set job_samples to at most 4",
    ):
        GridJobData.from_config({"job_samples": 5}, context=CONTEXT, record2sample=grid, environ={})


def test_form_unit_makes_one_unit_of_a_sets_samples(storage_database: Database) -> None:
    """rule: P-SET-14 P-SET-19 P-BUF-5 the n samples of one set form one unit, stored as one
    group, trained in one job."""
    grid = Grid(CONTEXT, steps=3)
    pipeline = training_pipeline(grid, GridJobData(CONTEXT, job_samples=1), storage_database)
    pipeline.push(call("c1"))
    pipeline.push(call("c2", session="b"))
    stored = [s.id for s in sample_store(storage_database, "s").untrained("c")]
    assert stored == ["c1:0", "c1:1", "c1:2", "c2:0", "c2:1", "c2:2"]
    buffer = pipeline.buffer()  # one sample asked for, its whole unit taken
    assert [s.sample_id for s in buffer] == ["c1:0", "c1:1", "c1:2"]
    assert len({s.group_id for s in buffer}) == 1
    assert buffer[0].group_id is not None


# -- staleness in reef.testing, and a sample that names no artifact ---------------------------


def test_the_testing_context_checks_staleness_by_default() -> None:
    """rule: P-STALE-10 a recipe's test sees staleness as a deployment with a loader does."""
    assert pipeline_context().has_runtime_loader is True
    assert pipeline_context(has_runtime_loader=False).has_runtime_loader is False
    assert PipelineContext("s", "c").has_runtime_loader is False  # the runtime says when


def test_a_sample_without_artifact_is_stale_and_said_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """rule: P-STALE-8 once an artifact is served, a sample naming none is stale, and a warning
    names it (once, however often the buffer is computed)."""
    stage = ReportSamples(CONTEXT)
    bare = TrajectorySample({"steps": []}, sample_id="r1:0")
    assert stage.is_stale(bare) is False  # no artifact served yet (P-STALE-11)
    stage.observe_serving_artifact_id("art1")
    with caplog.at_level(logging.WARNING, logger="reef.record2sample.stage"):
        assert stage.is_stale(bare) is True
        assert stage.is_stale(bare) is True
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "sample r1:0 names no artifact" in warnings[0]


# -- uploads without knowing the stored body ---------------------------------------------------


UPLOAD = {
    "schema_version": "ATIF-v1.8",
    "session_id": "up-1",
    "agent": {"name": "a", "version": "1"},
    "steps": [
        {"step_id": 1, "source": "user", "message": "hi"},
        {"step_id": 2, "source": "agent", "message": "hello"},
    ],
}


def test_add_upload_reaches_the_buffer_of_a_stage_that_takes_uploads(
    storage_database: Database,
) -> None:
    """rule: P-UP-1 P-UP-3 an upload stored as the service stores it reaches the buffer."""
    jobs = GroupedJobData(CONTEXT, job_samples=1)
    pipeline = training_pipeline(ReportSamples(CONTEXT), jobs, storage_database)
    assert add_upload(storage_database, "s", "up-1", UPLOAD) is True
    assert add_upload(storage_database, "s", "up-1", UPLOAD) is False
    (sample,) = pipeline.buffer()
    assert sample.sample_id == "up-1"
    assert isinstance(sample, TrajectorySample)
    assert sample.trajectory == UPLOAD
    assert [s.id for s in sample_store(storage_database, "s").untrained("c")] == ["up-1"]
