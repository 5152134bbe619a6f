"""The job history and the stale marks the trainer writes for people to read (the console):
each job with its end and metrics, each sample it consumed with the reward it trained with and
what an extension said of it; submissions that never reached the component end as released;
the samples a trainer leaves out as stale. Real :class:`Trainer` threads on SQLite (and
PostgreSQL with REEF_TEST_DATABASE_URL)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

import attrs
import pytest

from reef.components.interface import JobHandle
from reef.core.job_data import JobData, JobOutcome, Sample, TrajectorySample
from reef.core.records import Report
from reef.hookspecs import hookimpl
from reef.plugins import Plugins
from reef.record2sample.no_samples import NO_RECIPE_SAMPLES, NoSamples
from reef.storage import (
    Database,
    DropCounters,
    JobHistory,
    RecordStore,
    SampleBrowser,
    SampleFilter,
    StaleSamples,
    TrainerSamples,
    TrainerState,
)
from reef.testing.components import (
    RecordingComponent,
    grouped_parts,
    store_groups,
    train_until_submitted,
)
from reef.train.trainer import Trainer, TrainerSettings


class RetireFirstGroup:
    """An extension that takes the first group out of each job without giving it back (as
    Agent ECC retires an excluded group), sets every other reward to 0.5, and says so."""

    @hookimpl
    def reef_before_submit(self, job_data: JobData) -> JobData | None:
        first = job_data.samples[0].group_id
        kept = tuple(
            attrs.evolve(s, reward=0.5)
            for s in job_data.samples
            if s.group_id != first and isinstance(s, TrajectorySample)
        )
        return attrs.evolve(job_data, samples=kept)

    @hookimpl
    def reef_job_provenance(self, job_data: JobData) -> dict[str, Any] | None:
        return {
            "audit": {
                "job": {"epoch": 7},
                "samples": {"g1-0": {"verdict": "fail"}, "g2-0": {"verdict": "pass"}},
            }
        }


class ReportingComponent(RecordingComponent):
    """Finishes each job with metrics: scalars and a list (a per-sample report)."""

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        metrics = {"loss": 0.25, "per_sample": [1, 2], "objective": "sft"}
        return JobOutcome(handle.job_id, self.name, "finished", metrics=metrics)


class DivergingComponent(RecordingComponent):
    """Finishes each job with metrics that are not finite: a diverged loss."""

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        metrics = {"loss": math.nan, "grad_norm": math.inf}
        return JobOutcome(handle.job_id, self.name, "finished", metrics=metrics)


class RefusingComponent(RecordingComponent):
    """Refuses every submission."""

    def submit(self, data: JobData, parameters: Mapping[str, Any] | None = None) -> JobHandle:
        super().submit(data, parameters)
        raise RuntimeError("no room on the accelerator")


class FreshComponent(RecordingComponent):
    """Knows only the jobs submitted to it: a restarted component that never got the job."""

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        if handle.job_id not in {d.id for d in self.submitted}:
            return None
        return super().poll(handle)


class MarkedStale(NoSamples):
    """A stage that holds the samples named in :attr:`stale` stale."""

    stale: frozenset[str] = frozenset()

    def is_stale(self, sample: Sample) -> bool:
        return str(sample.sample_id) in self.stale


def _run(
    database: Database,
    component: RecordingComponent,
    plugins: Plugins | None = None,
    *,
    job_samples: int = 4,
) -> None:
    """Run a trainer until ``component`` got its jobs, then stop it (a running job ends and
    commits first)."""
    build = grouped_parts(component, job_samples=job_samples, record2sample=MarkedStale)
    train_until_submitted(database, component, build, plugins=plugins)


def test_the_history_keeps_each_job_its_samples_rewards_and_what_extensions_said(
    storage_database: Database,
) -> None:
    store_groups(TrainerSamples(storage_database, "s"))
    plugins = Plugins(blocked=())
    plugins.register(RetireFirstGroup(), "audit")
    _run(storage_database, ReportingComponent(), plugins)

    history = JobHistory(storage_database, "s")
    [job] = history.read()
    assert (job.trainer, job.event, job.error) == ("c", "finished", None)
    assert job.submitted_at is not None
    assert job.ended_at is not None
    assert job.submitted_at <= job.ended_at
    # lists are left out
    assert job.metrics == {"loss": 0.25, "objective": "sft"}
    assert (job.trained, job.consumed, job.reward_mean) == (2, 4, 0.5)
    assert job.extensions == {"audit": {"epoch": 7}}
    assert job.artifact_id == "art-0"  # what the component published once it ended
    [retired] = history.of_sample("g1-0")
    assert retired.job.job_id == job.job_id
    assert (retired.sample.trained, retired.sample.reward) == (False, None)
    assert retired.sample.extensions == {"audit": {"verdict": "fail"}}
    [trained] = history.of_sample("g2-0")
    assert (trained.sample.trained, trained.sample.reward) == (True, 0.5)
    assert trained.sample.extensions == {"audit": {"verdict": "pass"}}
    assert history.of_sample("g2-1")[0].sample.extensions == {}
    assert history.read(trainer="other") == []
    assert history.read(before=job.seq) == []


def test_a_job_whose_metrics_are_not_finite_ends_and_the_trainer_goes_on(
    storage_database: Database,
) -> None:
    """A diverged job (NaN loss) ends like any other: its outcome is durable and read back
    as it was, and the history shows the numbers by name."""
    samples = TrainerSamples(storage_database, "s")
    store_groups(samples)
    _run(storage_database, DivergingComponent())
    [job] = JobHistory(storage_database, "s").read()
    assert (job.event, job.metrics) == ("finished", {"loss": "nan", "grad_norm": "inf"})
    last = samples.last_job_outcome("c")
    assert last is not None
    assert math.isnan(last["metrics"]["loss"])
    assert samples.train_counts("c", ["g1-0", "g2-0"]) == {"g1-0": 1, "g2-0": 1}


def test_a_job_the_component_refuses_ends_released_and_its_samples_wait(
    storage_database: Database,
) -> None:
    samples = TrainerSamples(storage_database, "s")
    store_groups(samples)
    _run(storage_database, RefusingComponent(expected_jobs=2))
    jobs = JobHistory(storage_database, "s").read()
    assert jobs
    assert {j.event for j in jobs} == {"released"}
    assert {j.artifact_id for j in jobs} == {None}  # it made no weights
    assert "no room on the accelerator" in str(jobs[0].error)
    assert samples.train_counts("c", ["g1-0", "g2-0"]) == {"g1-0": 0, "g2-0": 0}


def test_a_submission_a_crash_stopped_before_the_component_ends_released_at_the_next_start(
    storage_database: Database,
) -> None:
    """The crash came after the trainer noted the job (running, and in the history) and
    before the component had it: the next tenure releases the data and the history says so;
    the data then trains in a job of its own."""
    samples = TrainerSamples(storage_database, "s")
    store_groups(samples)
    history = JobHistory(storage_database, "s")
    history.submitted("c", "lost-job", [])
    history.submitted("c", "crashed-job", [])
    TrainerState(storage_database, "s").set_running_job(
        "c",
        {"job_id": "crashed-job", "sample_ids": [], "instruction_id": None},
    )
    _run(storage_database, FreshComponent())
    events = {j.job_id: (j.event, j.error) for j in history.read()}
    assert events["lost-job"][0] == "released"
    assert events["crashed-job"][0] == "released"
    assert "before the job reached its component" in str(events["crashed-job"][1])
    assert [e for j, (e, _) in events.items() if j not in ("lost-job", "crashed-job")] == [
        "finished"
    ]


def test_the_trainer_writes_the_samples_it_leaves_out_as_stale(
    storage_database: Database,
) -> None:
    """rule: P-BUF-4 the stale sample's group stays out of the buffer; the sample is marked
    stale for the trainer, its fresh group mate is not; a later tenure that holds nothing
    stale clears the marks, and the group trains."""
    samples = TrainerSamples(storage_database, "s")
    store_groups(samples)
    marks = StaleSamples(storage_database, "s")
    browser = SampleBrowser(storage_database, "s")
    MarkedStale.stale = frozenset({"g1-0"})
    try:
        _run(storage_database, RecordingComponent(), job_samples=2)
    finally:
        MarkedStale.stale = frozenset()
    assert samples.train_counts("c", ["g1-0", "g2-0"]) == {"g1-0": 0, "g2-0": 1}
    assert marks.marked(["g1-0", "g1-1", "g2-0"]) == {"g1-0": ("c",)}
    page = browser.page(SampleFilter(stale=True))
    assert [s.stored.id for s in page] == ["g1-0"]
    assert browser.page(SampleFilter(stale=True, trainer="x")) == []

    _run(storage_database, RecordingComponent(), job_samples=2)
    assert marks.marked(["g1-0", "g1-1"]) == {}
    assert samples.train_counts("c", ["g1-0", "g1-1"]) == {"g1-0": 1, "g1-1": 1}


class Killed(BaseException):
    """The process dies here: nothing after it runs (no handler of the trainer catches it)."""


class DyingAfterSubmit(RecordingComponent):
    """Takes the job, then the trainer's process dies before the commit."""

    def submit(self, data: JobData, parameters: Mapping[str, Any] | None = None) -> JobHandle:
        super().submit(data, parameters)
        raise Killed


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_records_a_recovered_commit_ends_are_counted_by_reason(
    storage_database: Database,
) -> None:
    """decision: docs/decisions.md#counting-what-did-not-train -- rule: P-STALE-1 the records
    the stage ended go with the next job's commit; when the process dies before that commit and
    the next tenure commits the trained job, their ends are counted under their reason, as the
    commit would have counted them (the next tenure never sees them again)."""
    samples = TrainerSamples(storage_database, "s")
    store_groups(samples)
    reports = [Report(f"r{i}", "s", (f"call-{i}",)) for i in range(3)]
    RecordStore(storage_database, "s").append_many([(r, None) for r in reports])
    dying = DyingAfterSubmit()
    first = Trainer(
        "s",
        "c",
        database=storage_database,
        build=grouped_parts(dying, job_samples=2),
        settings=TrainerSettings(poll_interval=0.05),
    )
    first.start()
    assert dying.all_submitted.wait(30)
    first.stop(30)
    crashed = dying.submitted[0].id
    assert not samples.submitted_among("c", [crashed])  # the commit never came
    second = Trainer(
        "s",
        "c",
        database=storage_database,
        build=grouped_parts(RecordingComponent(), job_samples=2),
        settings=TrainerSettings(poll_interval=0.05),
    )
    second.start()
    try:
        deadline = time.monotonic() + 30
        while not samples.submitted_among("c", [crashed]) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        second.stop(30)
    assert samples.submitted_among("c", [crashed]) == {crashed}  # recovery committed it
    assert samples.consumed_record_ids("c") >= {r.id for r in reports}
    assert DropCounters(storage_database, "s").counts().get("c") == {NO_RECIPE_SAMPLES: 3}
