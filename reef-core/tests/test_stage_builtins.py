"""The built-in record-to-sample and sample-to-job stages, on their own (no store)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable
from typing import Any

import attrs
import pytest

from reef.core.job_data import JobData, Sample, TrajectorySample
from reef.core.plugins import NoSettings, PluginConfigError, RecipeConfigError
from reef.core.records import InferenceRecord, JudgedRecord, Judgment, Report
from reef.pipeline_context import PipelineContext
from reef.recipe.grouped.processor import GroupedJobData, GroupedReportSamples
from reef.record2sample import (
    BackgroundJobWorker,
    GroupDecision,
    JudgedSamples,
    NoSamples,
    RecordJudging,
    RecordSet,
    RecordSetError,
    RecordSetOverlap,
    ReportContext,
    ReportGrouping,
    ReportSamples,
    SampleResult,
    SampleStatus,
    SkippedReport,
    TrajectorySamples,
)
from reef.sample2job import Sample2Job
from reef.testing.records import call, report

CTX = PipelineContext("s", "c", has_runtime_loader=True)


def sample_ids_of(stage: Any) -> list[list[str]]:
    return [list(unit.record_ids) for unit in stage.ready_units()]


# -- record sets ---------------------------------------------------------------------------


def test_record_set_definition() -> None:
    """rule: P-SET-1 a record set holds one or more records and each record they reference."""
    c1 = call("c1")
    RecordSet("r", (c1, report("r", "c1")))
    with pytest.raises(RecordSetError, match="no record"):
        RecordSet("r", ())
    with pytest.raises(RecordSetError, match="lacks records"):
        RecordSet("r", (report("r", "c1"),))
    judged = JudgedRecord("j", "s", "c1", Judgment(1.0))
    with pytest.raises(RecordSetError, match="c1"):
        RecordSet("j", (judged,))
    RecordSet("j", (c1, judged))


def test_sample_result_ready_iff_samples() -> None:
    """rule: P-SET-7 one SampleResult per set; READY holds samples, SKIPPED none."""
    assert SampleResult.ready(()).status is SampleStatus.SKIPPED
    with pytest.raises(ValueError, match="READY"):
        SampleResult(SampleStatus.READY, ())


def test_report_forms_one_set_with_its_trajectory() -> None:
    """rule: P-STG-1 P-SET-3 P-SET-8 P-SET-14 P-SET-15 the stage decides the set and unit (the
    report and the calls of its trajectory form one set; a lone report is a unit of one set,
    ready once its sample is made) and turns the set into its sample."""
    stage = ReportSamples(CTX)
    for record in (call("c1", 1), call("c2", 2), call("c3", 3), report("r", "c3", score=0.5)):
        stage.push(record)
    (unit,) = stage.ready_units()
    assert unit.record_ids == ("c1", "c2", "c3", "r")
    ((set_id, (sample,)),) = stage.unit_samples(unit)
    assert set_id == "r"
    assert isinstance(sample, TrajectorySample)
    assert sample.reward == 0.5
    assert sample.report_id == "r"
    assert sample.source_record_ids == ("c1", "c2", "c3")
    assert sample.artifact_id == "art1"
    stage.consume(unit)
    assert stage.records.set_samples == {}  # rule: P-SET-17 consume forgets the unit's samples
    assert set(stage.releasable_record_ids()) == {"c1", "c2", "c3", "r"}


def test_form_refuses_overlap_and_shared_trajectory_ends() -> None:
    """rule: P-SET-5 P-SET-6 no record in two sets; a report whose trajectory holds an
    inference of another set ends without training, whether that set waits or trained."""
    stage = ReportSamples(CTX)
    for record in (call("c1", 1), call("c2", 2), report("r1", "c1")):
        stage.push(record)
    with pytest.raises(RecordSetOverlap) as refused:
        stage.form(RecordSet("x", (stage.held_record("c2") or call("c2", 2), call("c1", 1))))
    assert refused.value.record_ids == ("c1",)
    stage.push(report("r2", "c2"))  # c2's trajectory holds c1, taken by r1
    assert stage.ended_records() == {"r2": "shared_trajectory"}
    assert len(stage.ready_units()) == 1
    # the other set trained already: still taken
    stage.consume(stage.ready_units()[0])
    stage.release_records(stage.releasable_record_ids())
    stage.push(call("c3", 3))
    stage.push(report("r3", "c3"))
    assert stage.ended_records()["r3"] == "shared_trajectory"


def test_engine_abort_rejects_the_whole_set() -> None:
    """rule: P-SET-10 P-SET-11 P-SET-12 an engine abort rejects the report and every referenced
    inference, through the normal ending, without altering the stored response."""
    stage = ReportSamples(CTX)
    aborted = call("c2", 2, finish="abort")
    response_before = dict(aborted.response or {})
    for record in (call("c1", 1), aborted, report("r", "c2")):
        stage.push(record)
    assert stage.ready_units() == ()
    assert stage.ended_records() == {
        "c1": "engine_abort",
        "c2": "engine_abort",
        "r": "engine_abort",
    }
    assert aborted.response == response_before
    marked = InferenceRecord("m1", "s", call("m1").request, call("m1").response, aborted=True)
    stage.push(marked)
    stage.push(report("rm", "m1"))
    assert stage.ended_records()["rm"] == "engine_abort"


class _Grouping(ReportGrouping):
    def __init__(self, size: int, *, discard_on: float | None = None) -> None:
        self.size = size
        self.discard_on = discard_on

    def is_training_report(self, report: Report) -> bool:
        return report.metadata.get("role") != "designer"

    def placement(self, context: ReportContext) -> tuple[Hashable | None, str | None]:
        meta = context.report.metadata
        return meta.get("group"), meta.get("slot")

    def decide(self, key: Hashable, members: tuple[ReportContext, ...]) -> GroupDecision:
        if any(m.report.score == self.discard_on for m in members):
            return GroupDecision.DISCARD
        return GroupDecision.READY if len(members) >= self.size else GroupDecision.INCOMPLETE


def _sessions(stage: ReportSamples, *names: str) -> None:
    for name in names:
        stage.push(call(name, session=name))


def test_grouping_first_slot_wins_and_group_is_fixed_when_ready() -> None:
    """rule: P-REP-9 P-REP-10 P-REP-13 P-SET-14 P-SET-19 placement and decide; a repeated slot
    keeps the first report; a ready group is one unit; a later report of the key opens a new
    group."""
    stage = ReportSamples(CTX, _Grouping(2))
    _sessions(stage, "a", "b", "c", "d", "e")
    stage.push(report("r1", "a", group="g", slot="x"))
    stage.push(report("r2", "b", group="g", slot="x"))
    assert stage.ended_records() == {"r2": "slot_taken"}
    assert stage.ready_units() == ()
    stage.push(report("r3", "c", group="g"))
    (unit,) = stage.ready_units()
    assert [s.id for s in unit.record_sets] == ["r1", "r3"]
    stage.push(report("r4", "d", group="g"))  # a new group, incomplete
    assert len(stage.ready_units()) == 1
    stage.push(report("r5", "b", group="g"))  # b stayed free: r2 ended before it was a set
    assert [s.id for s in stage.ready_units()[1].record_sets] == ["r4", "r5"]


def test_discarded_group_ends_its_records() -> None:
    """rule: P-REP-10 P-REP-7 DISCARD ends every member; a report that was a set owns its
    calls outright."""
    stage = ReportSamples(CTX, _Grouping(3, discard_on=0.0))
    _sessions(stage, "a", "b")
    stage.push(report("r1", "a", group="g"))
    stage.push(report("r2", "b", group="g", score=0.0))
    assert stage.ready_units() == ()
    assert stage.ended_records() == {
        "a": "group_discarded",
        "r1": "group_discarded",
        "b": "group_discarded",
        "r2": "group_discarded",
    }


def test_not_training_report_releases_and_keeps_single_source() -> None:
    """rule: P-REP-8 a report that is not training data is released without assembly; a
    single referenced inference stays for a report that trains on it."""
    stage = ReportSamples(CTX, _Grouping(1))
    _sessions(stage, "a", "b", "c")
    stage.push(report("d1", "a", role="designer"))
    assert stage.ended_records() == {"d1": "not_training_report"}
    stage.push(report("d2", "b", "c", role="designer"))  # several sources go with it
    assert stage.ended_records()["b"] == "not_training_report"
    stage.push(report("r1", "a", group="g"))
    assert len(stage.ready_units()) == 1


def test_exclusive_sources() -> None:
    """rule: P-REP-7 exclusive_sources: a report ending before it is a set takes its calls."""
    stage = ReportSamples(CTX, _Grouping(2), exclusive_sources=True)
    _sessions(stage, "a", "b")
    stage.push(report("r1", "a", group="g", slot="x"))
    stage.push(report("r2", "b", group="g", slot="x"))
    assert stage.ended_records() == {"r2": "slot_taken", "b": "slot_taken"}
    stage.push(report("r3", "b"))
    assert stage.ended_records()["r3"] == "shared_trajectory"


class _Skipping(ReportSamples):
    def make_sample(self, context: ReportContext) -> Sample | SkippedReport:
        if context.report.score is None:
            return SkippedReport("no score")
        if context.report.score < 0:
            raise ValueError("unsupported trajectory")
        return TrajectorySample({"steps": []}, reward=context.require_score())


def test_skipped_report_and_failed_assembly() -> None:
    """rule: P-REP-11 P-SET-9 P-REP-14 SkippedReport ends the records; a training data error
    propagates and leaves the report unprocessed, its records protected."""
    stage = _Skipping(CTX)
    _sessions(stage, "a", "b")
    stage.push(report("r1", "a", score=None))
    assert stage.ended_records() == {"a": "no score", "r1": "no score"}
    with pytest.raises(ValueError, match="unsupported"):
        stage.push(report("r2", "b", score=-1.0))
    assert stage.held_record("b") is not None
    assert not stage.is_taken("b")
    with pytest.raises(ValueError, match="unsupported"):  # not marked processed: tried again
        stage.push(report("r2", "b", score=-1.0))


def test_require_score() -> None:
    """rule: P-REP-5 context.require_score() for a method that needs a reward."""
    context = ReportContext(report("r", "c1", score=None), (call("c1"),), (call("c1"),))
    with pytest.raises(ValueError, match="no score"):
        context.require_score()


def test_other_component_report_is_released_when_admitted() -> None:
    """rule: P-PIPE-20 a report shaped for another component is released when the scenario
    admits its type, and fails otherwise."""
    stage = ReportSamples(CTX)
    _sessions(stage, "a", "b")
    with pytest.raises(ValueError, match="does not admit"):
        stage.push(report("r1", "a", report_type="designer"))
    stage.context_changed(PipelineContext("s", "c", admitted_report_types=frozenset({"designer"})))
    stage.push(report("r2", "b", report_type="designer"))
    assert stage.ended_records() == {"r2": "other_component_report"}


def test_trajectory_samples_train_idle_trajectories() -> None:
    """rule: P-SET-4 a trajectory without a report that went idle for trajectory_idle_seconds
    forms one set; its branch through taken calls ends."""
    stage = TrajectorySamples(CTX, trajectory_idle_seconds=10)
    stage.push(call("c1", 1, at=0))
    stage.push(call("c2", 2, at=5))
    stage.advance(14)
    assert stage.ready_units() == ()
    stage.advance(15)
    (unit,) = stage.ready_units()
    assert unit.record_ids == ("c1", "c2")
    sample = stage.unit_samples(unit)[0][1][0]
    assert isinstance(sample, TrajectorySample)
    assert [s["source"] for s in sample.trajectory["steps"]] == [
        "system",
        "user",
        "agent",
        "user",
        "agent",
    ]
    stage.push(call("c3", 3, at=20))  # continues a trajectory already taken
    stage.advance(100)
    assert stage.ended_records() == {"c3": "shared_trajectory"}


class _Judging(RecordJudging):
    def __init__(self) -> None:
        self.gate = threading.Event()

    def observe(self, record: Any, now: float, stage: JudgedSamples) -> None:
        if isinstance(record, InferenceRecord):
            if record.id.startswith("track"):
                stage.track(record)
            else:
                stage.dispatch(record)

    async def judge(self, record: InferenceRecord) -> Judgment:
        await asyncio.to_thread(self.gate.wait, 10)
        return Judgment(0.25 if record.id != "bad" else None)

    def expire(self, record: InferenceRecord, now: float) -> bool:
        return now > 100


class _Judged(JudgedSamples):
    def make_sample(self, record: InferenceRecord, judgment: Judgment) -> Sample | None:
        if judgment.score is None:
            return None
        return TrajectorySample({"steps": []}, reward=judgment.score)


def test_judged_samples_judge_on_the_stages_worker() -> None:
    """rule: P-JUDGE-1 P-JUDGE-2 P-JUDGE-3 P-SLOW-2 P-SLOW-1 push hands records to the worker;
    advance forms judged sets; background_jobs_running meanwhile; expire retires. push and
    advance return while the judge (the model call) is still blocked on its gate."""
    judging = _Judging()
    stage = _Judged(judging, BackgroundJobWorker("t"), context=CTX)
    try:
        stage.push(call("c1"))
        stage.push(call("bad", session="b"))
        stage.push(call("track1", session="t"))
        assert stage.background_jobs_running()
        assert stage.tracked_record("track1") is not None
        stage.advance(1)
        assert stage.ready_units() == ()
        judging.gate.set()
        while len(stage.ready_units()) + ("bad" in stage.ended_records()) < 2:
            assert stage.worker.wait(5)
            stage.advance(2)
        (unit,) = stage.ready_units()
        assert unit.record_ids == ("c1", "c1:judged")
        assert stage.ended_records() == {"bad": "no_sample", "bad:judged": "no_sample"}
        assert not stage.background_jobs_running()
        stage.advance(101)
        assert stage.ended_records()["track1"] == "expired"
    finally:
        stage.close(5)


def test_worker_close_raises_timeout_when_cleanup_overruns() -> None:
    """rule: P-SLOW-3 close stops the worker; cleanup beyond the timeout raises TimeoutError."""
    release = threading.Event()
    started = threading.Event()

    async def stubborn() -> None:
        try:
            started.set()
            await asyncio.Event().wait()
        finally:
            release.wait(10)  # blocks the loop: cleanup that overruns

    worker = BackgroundJobWorker("stubborn")
    worker.submit("k", stubborn)
    assert started.wait(5)
    with pytest.raises(TimeoutError, match="stubborn"):
        worker.close(0.2)
    release.set()
    with pytest.raises(RuntimeError, match="closed"):
        worker.submit("k2", stubborn)


def test_worker_close_runs_the_cleanup_on_its_loop_after_the_jobs_ended() -> None:
    """What the jobs shared is closed on the loop they used, once the cancelled jobs ended; a
    failing cleanup is raised by close, after the loop stopped."""
    events: list[str] = []
    started = threading.Event()

    async def job() -> None:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            events.append("job ended")

    async def cleanup() -> None:
        events.append(f"cleanup on {threading.current_thread().name}")
        raise OSError("could not close")

    worker = BackgroundJobWorker("shared")
    worker.submit("k", job)
    assert started.wait(5)
    with pytest.raises(OSError, match="could not close"):
        worker.close(5, cleanup=cleanup)
    assert events == ["job ended", "cleanup on shared"]
    BackgroundJobWorker("idle").close(5, cleanup=cleanup)  # no job ran: nothing to clean up
    assert events == ["job ended", "cleanup on shared"]


# -- staleness -----------------------------------------------------------------------------


def _sample(artifact: str | None) -> TrajectorySample:
    return TrajectorySample(
        {"steps": [], "extra": {"reef": {"records": [{"artifact_id": artifact}]}}}
    )


def test_staleness_counts_served_artifacts() -> None:
    """rule: P-STALE-3 P-STALE-5 P-STALE-6 P-STALE-8 P-STALE-9 P-STALE-11 lag in served
    artifacts; no artifact or an unseen one is stale; nothing stale before the first."""
    stage = ReportSamples(CTX, max_staleness=1)
    assert not stage.is_stale(_sample(None))
    stage.observe_serving_artifact_id("a1")
    stage.observe_serving_artifact_id("a1")
    stage.observe_serving_artifact_id("a2")
    assert not stage.is_stale(_sample("a1"))
    assert not stage.is_stale(_sample("a2"))
    stage.observe_serving_artifact_id("a3")
    assert stage.is_stale(_sample("a1"))
    assert not stage.is_stale(_sample("a2"))
    assert stage.is_stale(_sample(None))
    assert stage.is_stale(_sample("elsewhere"))
    with pytest.raises(ValueError, match="non-negative"):
        ReportSamples(CTX, max_staleness=-1)


def test_staleness_is_per_scenario_and_needs_a_loader() -> None:
    """rule: P-STALE-7 P-STALE-10 P-STALE-2 artifacts count per pipeline (scenario); without a
    runtime loader nothing is stale."""
    one, other = ReportSamples(CTX), ReportSamples(CTX)
    one.observe_serving_artifact_id("a1")
    other.observe_serving_artifact_id("a1")
    other.observe_serving_artifact_id("b1")  # another scenario's publication
    assert not one.is_stale(_sample("a1"))
    no_loader = ReportSamples(PipelineContext("s", "c"))
    no_loader.observe_serving_artifact_id("a1")
    no_loader.observe_serving_artifact_id("a2")
    assert not no_loader.is_stale(_sample(None))


def test_from_config_parses_settings() -> None:
    """rule: P-STG-10 P-STG-11 P-STG-12 P-STALE-12 P-STG-14 stages parse their settings;
    NoSamples refuses every key, max_staleness included, and makes no sample."""
    stage = ReportSamples.from_config({"max_staleness": 2}, context=CTX, environ={})
    assert stage.max_staleness == 2
    with pytest.raises(PluginConfigError, match="max_staleness"):
        ReportSamples.from_config({"max_staleness": -1}, context=CTX, environ={})
    with pytest.raises(PluginConfigError, match="no keys"):
        NoSamples.from_config({"max_staleness": 0}, context=CTX, environ={})
    assert NoSamples.Settings is NoSettings
    none = NoSamples.from_config(None, context=CTX, environ={})
    none.push(call("c1"))
    none.push(report("r", "c1"))
    assert none.ready_units() == ()
    assert set(none.releasable_record_ids()) == {"c1", "r"}
    traj = TrajectorySamples.from_config({"trajectory_idle_seconds": 5}, context=CTX, environ={})
    assert traj.trajectory_idle_seconds == 5
    grouped = GroupedReportSamples.from_config({"group_size": 2}, context=CTX, environ={})
    _sessions(grouped, "a", "b")
    grouped.push(report("r1", "a", group="g"))
    grouped.push(report("r2", "b", group="g"))
    assert len(grouped.ready_units()) == 1


# -- sample-to-job -------------------------------------------------------------------------


class _Harness(Sample2Job):
    default_job_samples = 1

    def make_job_data(self, samples: Any, data_id: str) -> JobData:
        return JobData(data_id, tuple(samples))


class _Grid(Sample2Job):
    def __init__(
        self, context: PipelineContext, *, job_samples: int, buffer_size: int | None = None
    ) -> None:
        super().__init__(
            context, job_samples=job_samples, buffer_size=buffer_size, max_job_samples=8
        )


def test_job_size() -> None:
    """rule: P-SIZE-1 P-SIZE-2 P-SIZE-3 P-SIZE-4 P-BUF-6 P-STG-4 P-STG-8 job_samples is required
    for weight recipes, defaults for harness stages, is capped by max_job_samples; buffer_size
    defaults to job_samples and is refused below it."""
    stage = ReportSamples(CTX)
    with pytest.raises(RecipeConfigError, match="job_samples"):
        GroupedJobData.from_config({}, context=CTX, record2sample=stage, environ={})
    built = GroupedJobData.from_config(
        {"job_samples": 4}, context=CTX, record2sample=stage, environ={}
    )
    assert (built.job_samples, built.buffer_size) == (4, 4)
    harness = _Harness.from_config(None, context=CTX, record2sample=stage, environ={})
    assert harness.job_samples == 1
    with pytest.raises(PluginConfigError, match="smaller than job_samples"):
        GroupedJobData.from_config(
            {"job_samples": 4, "buffer_size": 2}, context=CTX, record2sample=stage, environ={}
        )
    with pytest.raises(PluginConfigError, match="job_samples"):
        GroupedJobData.from_config({"job_samples": 0}, context=CTX, record2sample=stage, environ={})
    with pytest.raises(PluginConfigError, match="more than this stage's job data"):
        _Grid.from_config({"job_samples": 9}, context=CTX, record2sample=stage, environ={})
    assert _Grid.from_config({"job_samples": 8}, context=CTX, record2sample=stage, environ={})


def test_sample2job_defaults() -> None:
    """rule: P-MODE-1 P-UP-3 supported modes default to auto and manual; uploads off by
    default."""
    assert Sample2Job.supported_training_modes == frozenset({"auto", "manual"})
    assert Sample2Job.accepts_trajectories is False
    assert GroupedJobData.accepts_trajectories is True
    schema = GroupedJobData(CTX, job_samples=1).output_schema
    assert schema["properties"]["samples"]["type"] == "array"


def test_uploaded_sample_default_is_the_trajectory() -> None:
    """rule: P-UP-4 the default uploaded_sample returns the trajectory as uploaded."""
    trajectory = {"schema_version": "ATIF-v1.4", "steps": [{"source": "agent", "message": "x"}]}
    assert ReportSamples(CTX).uploaded_sample(trajectory) == TrajectorySample(trajectory)


@pytest.mark.parametrize("eligible", [True, False])
def test_a_stored_report_with_an_eligibility_flag_fails_explicitly_on_replay(
    eligible: bool,
) -> None:
    """rule: P-LAYOUT-5 P-REP-3 a legacy report carrying metadata.training.eligible (either
    value) fails explicitly when replayed; it is neither trained nor dropped, and its records
    stay held until it is corrected."""
    from reef.record2sample.record_sets import ReportError

    stage = ReportSamples(CTX)
    stage.push(call("c1", 1))
    legacy = report("r", "c1", training={"eligible": eligible})
    with pytest.raises(ReportError, match=r"metadata\.training\.eligible"):
        stage.push(legacy)
    assert not stage.ready_units()
    assert "c1" not in stage.releasable_record_ids()
    corrected = report("r", "c1")
    stage.push(corrected)  # the same id, corrected: it trains (the failed one was not taken)
    (unit,) = stage.ready_units()
    assert unit.record_ids == ("c1", "r")


def _sampled(cid: str) -> InferenceRecord:
    """A call whose engine returned the tokens it sampled, as vLLM answers ``return_token_ids``."""
    record = call(cid)
    (choice,) = record.response["choices"]
    response = {
        **record.response,
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                **choice,
                "token_ids": [7, 8, 2],
                "logprobs": {"content": [{"logprob": -0.5}, {"logprob": -0.25}, {"logprob": 0.0}]},
            }
        ],
    }
    return attrs.evolve(record, response=response)


def _agent_metrics(sample: Sample) -> dict[str, Any]:
    assert isinstance(sample, TrajectorySample)
    (step,) = [s for s in sample.trajectory["steps"] if s["source"] == "agent"]
    metrics: dict[str, Any] = step.get("metrics") or {}
    return metrics


def test_grouped_samples_keep_the_sampled_tokens_only_when_asked() -> None:
    """rule: P-REND-1 a sample holds no tokens by default; ``train_sampled_tokens`` keeps the
    engine's own (ids and log probabilities), for the component to train as they are."""
    plain = ReportSamples(CTX)  # the default reports stage, and what recipes build on
    plain.push(_sampled("c1"))
    plain.push(report("r", "c1", score=1.0))
    (unit,) = plain.ready_units()
    ((_, (sample,)),) = plain.unit_samples(unit)
    assert "completion_token_ids" not in _agent_metrics(sample)
    samples = {}
    for config in ({"group_size": 1}, {"group_size": 1, "train_sampled_tokens": True}):
        stage = GroupedReportSamples.from_config(config, context=CTX, environ={})
        stage.push(_sampled("c1"))
        stage.push(report("r", "c1", score=1.0))
        (unit,) = stage.ready_units()
        ((_, (sample,)),) = stage.unit_samples(unit)
        samples[len(config)] = _agent_metrics(sample)
    assert "completion_token_ids" not in samples[1]
    assert "prompt_token_ids" not in samples[1]
    kept = samples[2]
    assert kept["prompt_token_ids"] == [1, 2, 3]
    assert kept["completion_token_ids"] == [7, 8, 2]
    assert kept["logprobs"] == [-0.5, -0.25, 0.0]
