"""TrainingPipeline on the real sample store (SQLite; PostgreSQL with REEF_TEST_DATABASE_URL)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest

from reef.core.job_data import (
    JobData,
    JobOutcome,
    Sample,
    TaskSample,
    TrainingInstruction,
    TrajectorySample,
)
from reef.pipeline_context import PipelineContext
from reef.recipe.grouped.processor import GroupedJobData, ReportGroups
from reef.record2sample import ReportSamples
from reef.storage import Database, NewSample, StaleSamples, TrainerSamples
from reef.storage.tables import sample_trains, samples as samples_table
from reef.testing.records import call, report
from reef.train.pipeline import GivenBackError, TrainingPipeline


class Counting(ReportSamples):
    """Counts the samples it makes: a restart must never make a stored one again."""

    made = 0

    def make_sample(self, context: Any) -> Any:
        Counting.made += 1
        return super().make_sample(context)


def build(
    database: Database,
    *,
    job_samples: int = 2,
    buffer_size: int | None = None,
    component: str = "c",
    trainers: Sequence[str] = (),
    stage: type[ReportSamples] = ReportSamples,
    group_size: int | None = None,
    loader: bool = True,
    max_staleness: int = 0,
    mode: str = "auto",
) -> TrainingPipeline:
    context = PipelineContext(
        "s",
        component,
        tuple(trainers),
        mode,
        has_runtime_loader=loader,  # type: ignore[arg-type]
    )
    grouping = ReportGroups(group_size) if group_size else None
    r2s = stage(context, grouping, max_staleness=max_staleness)
    s2j = GroupedJobData(context, job_samples=job_samples, buffer_size=buffer_size)
    return TrainingPipeline(r2s, s2j, samples=TrainerSamples(database, "s"), context=context)


def feed(pipeline: TrainingPipeline, name: str, *, artifact: str = "art1", **meta: Any) -> None:
    pipeline.push(call(f"{name}.c", session=name, artifact=artifact))
    pipeline.push(report(name, f"{name}.c", **meta))


def ids(data: JobData | None) -> list[str]:
    assert data is not None
    return [str(s.sample_id) for s in data.samples]


def train_counts(database: Database, trainer: str) -> dict[str, int]:
    query = samples_table.join(sample_trains, sample_trains.c.sample_seq == samples_table.c.seq)
    with database.read() as connection:
        rows = connection.execute(
            query.select()
            .with_only_columns(samples_table.c.id, sample_trains.c.count)
            .where(sample_trains.c.trainer == trainer)
        )
        return {row[0]: row[1] for row in rows}


def test_push_stores_units_and_acknowledge_counts(storage_database: Database) -> None:
    """rule: P-PIPE-3 P-SET-16 P-SET-18 P-PIPE-7 P-PIPE-9 P-PIPE-10 P-SIZE-5 P-MODE-4 units are
    stored with their records; job data of job_samples; acknowledgement lists sample:<id> and
    counts each once; a failed job gives nothing back."""
    pipeline = build(storage_database)
    feed(pipeline, "r1")
    assert not pipeline.ready(2)
    feed(pipeline, "r2")
    store = TrainerSamples(storage_database, "s")
    assert store.consumed_record_ids("c") == {"r1", "r1.c", "r2", "r2.c"}
    assert pipeline.ready(2)
    assert not pipeline.ready(None)  # rule: P-PIPE-6
    data = pipeline.build_job_data(2)
    assert ids(data) == ["r1:0", "r2:0"]
    assert data is not None
    assert data.id.startswith("s:data:")
    assert not pipeline.ready(1)  # handed out: not in the buffer
    acknowledged = pipeline.acknowledge(data.id)
    assert acknowledged == ("sample:r1:0", "sample:r2:0")
    assert train_counts(storage_database, "c") == {"r1:0": 1, "r2:0": 1}
    pipeline.job_ended(JobOutcome("j1", "c", "failed", error="boom"))
    assert pipeline.buffer() == ()  # rule: P-PIPE-10


def test_release_keeps_samples_in_buffer(storage_database: Database) -> None:
    """rule: P-PIPE-8 released job data's samples stay in the buffer."""
    pipeline = build(storage_database, job_samples=1)
    feed(pipeline, "r1")
    data = pipeline.build_job_data(1)
    assert data is not None
    assert pipeline.build_job_data(1) is None
    pipeline.release_job_data(data.id)
    assert ids(pipeline.build_job_data(1)) == ["r1:0"]


def test_groups_stay_together_and_buffer_size(storage_database: Database) -> None:
    """rule: P-SET-19 P-BUF-5 P-BUF-7 P-STG-3 a unit's samples share a group; the buffer takes
    buffer_size samples and the rest of the groups they touch; the rest waits."""
    pipeline = build(storage_database, job_samples=1, buffer_size=1, group_size=3)
    for name in ("a", "b", "c"):
        feed(pipeline, name, group="g")
    feed(pipeline, "d")
    data = pipeline.build_job_data(1)
    assert ids(data) == ["a:0", "b:0", "c:0"]
    assert data is not None
    assert len(set(data.group_ids)) == 1
    assert data.group_ids[0] is not None
    pipeline.acknowledge(data.id)
    assert ids(pipeline.build_job_data(1)) == ["d:0"]


def test_stale_samples_leave_out_their_group(storage_database: Database) -> None:
    """rule: P-BUF-4 P-STALE-6 P-BUF-7 P-UP-7 E-SEAL-6 a stale sample leaves out its whole group
    and stays untrained in the store; an upload is never stale. Staleness is checked when the
    buffer is handed out, not when the sample is admitted (stored)."""
    pipeline = build(storage_database, job_samples=1, buffer_size=10, group_size=2, max_staleness=1)
    pipeline.observe_serving_artifact_id("old")
    feed(pipeline, "a", artifact="old", group="g")
    feed(pipeline, "b", artifact="new", group="g")
    feed(pipeline, "c", artifact="new")
    upload = TrajectorySample({"schema_version": "ATIF-v1.4", "steps": []})
    store = TrainerSamples(storage_database, "s")
    store.add_upload(NewSample("up1", "trajectory", {"trajectory": upload.trajectory}))
    pipeline.observe_serving_artifact_id("new")
    assert [s.sample_id for s in pipeline.buffer()] == ["a:0", "b:0", "c:0", "up1"]
    pipeline.observe_serving_artifact_id("newer")  # a is 2 behind: a and its group-mate b wait
    assert [s.sample_id for s in pipeline.buffer()] == ["c:0", "up1"]
    assert {s.id for s in store.untrained("c")} == {"a:0", "b:0", "c:0", "up1"}
    # docs/decisions.md#counting-what-did-not-train: the fresh group-mate held out with the
    # stale sample is shown too
    status = pipeline.status()
    assert (status["stale_samples"], status["held_with_stale_group"]) == (1, 1)


def test_one_kind_per_buffer(storage_database: Database) -> None:
    """rule: P-BUF-2 P-BUF-3 P-STG-2 the buffer keeps the first sample's kind; in auto, a kind
    without job parameters does not count; eval tasks never enter."""
    pipeline = build(storage_database, job_samples=1, buffer_size=10)
    store = TrainerSamples(storage_database, "s")
    task = TaskSample("t1", {"instruction": "x"})
    store.add_samples("c", [NewSample("t1", "task", {"name": "t1", "task": task.task})])
    feed(pipeline, "a")
    assert [s.kind for s in pipeline.buffer()] == ["trajectory"]


def test_uploads(storage_database: Database) -> None:
    """rule: P-UP-6 P-UP-2 P-UP-8 a refused upload is skipped and stays unconsumed; a removed
    upload is forgotten; the commit lists sample:<trajectory_id>."""

    class Picky(ReportSamples):
        def uploaded_sample(self, trajectory: dict[str, Any]) -> Sample:
            if not trajectory.get("steps"):
                raise ValueError("no agent turn")
            return super().uploaded_sample(trajectory)

    pipeline = build(storage_database, job_samples=1, stage=Picky)
    store = TrainerSamples(storage_database, "s")
    store.add_upload(NewSample("empty", "trajectory", {"trajectory": {"steps": []}}))
    good = {"steps": [{"source": "agent", "message": "x"}]}
    store.add_upload(NewSample("good", "trajectory", {"trajectory": good}))
    store.add_upload(NewSample("gone", "trajectory", {"trajectory": good}))
    assert [s.sample_id for s in pipeline.buffer()] == ["good"]
    data = pipeline.build_job_data(1)
    assert data is not None
    assert pipeline.acknowledge(data.id) == ("sample:good",)
    store.remove_upload("gone")
    assert pipeline.buffer() == ()
    assert {s.id for s in store.untrained("c")} == {"empty"}


def test_a_removed_upload_leaves_the_buffer_computed_from_what_remains(
    storage_database: Database,
) -> None:
    """rule: P-BUF-5 P-UP-2 -- an upload that left the scenario is forgotten before the buffer
    takes its first buffer_size samples, not after: two trainers, jobs of 2, a buffer of 3,
    the store [x, up1, y, z] read once, then up1 removed: the buffer is x, y, z, ready for 3,
    and the next job takes all three (it used to take x, y: up1's place went unfilled)."""
    pipeline = build(storage_database, job_samples=2, buffer_size=3, trainers=("c", "d"))
    store = TrainerSamples(storage_database, "s")
    store.register_trainer("d", reads_uploads=True)
    feed(pipeline, "x")
    upload = {"steps": [{"source": "agent", "message": "x"}]}
    store.add_upload(NewSample("up1", "trajectory", {"trajectory": upload}))
    feed(pipeline, "y")
    feed(pipeline, "z")
    assert [s.sample_id for s in pipeline.buffer()] == ["c:x:0", "up1", "c:y:0"]
    assert store.remove_upload("up1")
    assert pipeline.ready(3)
    assert ids(pipeline.build_job_data(2)) == ["c:x:0", "c:y:0", "c:z:0"]


def test_manual_mode(storage_database: Database) -> None:
    """rule: P-MODE-5 P-MODE-7 P-MODE-8 P-MODE-10 P-MODE-11 P-MODE-12 P-MODE-13 manual trains
    only for an instruction, from the manual buffer; the auto buffer moves in on the switch;
    reserved data is unchanged by a later switch; FIFO instructions; bad modes refused."""
    pipeline = build(storage_database, job_samples=1, buffer_size=5)
    feed(pipeline, "a")
    feed(pipeline, "b")
    reserved = pipeline.build_job_data(1)
    assert ids(reserved) == ["a:0", "b:0"]
    pipeline.release_job_data(reserved.id)  # type: ignore[union-attr]
    pipeline.queue_instructions([TrainingInstruction("q1"), TrainingInstruction("q2")])
    assert pipeline.buffered_requests == 2
    pipeline.training_mode = "manual"
    feed(pipeline, "c")  # stored, but never joins the manual buffer by itself
    pipeline.remove_from_buffer(["b:0"])
    data = pipeline.build_job_data(1)
    assert data is not None
    assert data.id == "s:instruction:q1"
    assert data.request == TrainingInstruction("q1")
    assert ids(data) == ["a:0"]
    pipeline.training_mode = "auto"  # reserved data stays as it is
    assert pipeline.acknowledge(data.id) == ("sample:a:0", "instruction:q1")
    assert pipeline.buffered_requests == 1
    pipeline.training_mode = "manual"
    assert [s.sample_id for s in pipeline.buffer()] == ["b:0", "c:0"]  # the auto buffer moved in
    with pytest.raises(ValueError, match="unknown training mode"):
        pipeline.training_mode = "sometimes"

    class AutoOnly(GroupedJobData):
        supported_training_modes = frozenset({"auto"})

    with pytest.raises(NotImplementedError, match="manual"):
        TrainingPipeline(
            ReportSamples(pipeline.context),
            AutoOnly(pipeline.context, job_samples=1),
            samples=TrainerSamples(storage_database, "s"),
            context=PipelineContext("s", "c2", training_mode="manual"),
        )


def test_several_trainers_share_rows(storage_database: Database) -> None:
    """rule: P-PIPE-19 P-SET-18 one trainer per component: ids carry the component; each
    keeps its own consumption; uploads train for each accepting trainer."""
    one = build(storage_database, job_samples=1, buffer_size=5, component="x", trainers=("x", "y"))
    two = build(storage_database, job_samples=1, buffer_size=5, component="y", trainers=("x", "y"))
    store = TrainerSamples(storage_database, "s")
    store.add_upload(NewSample("up", "trajectory", {"trajectory": {"steps": []}}))
    for pipeline in (one, two):
        feed(pipeline, "a")
    assert [s.sample_id for s in one.buffer()] == ["up", "x:a:0"]
    assert [s.sample_id for s in two.buffer()] == ["up", "y:a:0"]
    data = one.build_job_data(1)
    assert data is not None
    one.acknowledge(data.id)
    assert [s.sample_id for s in two.buffer()] == ["up", "y:a:0"]


def test_recovery(storage_database: Database) -> None:
    """rule: P-SET-20 P-PIPE-13 Recovery: a restart never remakes a stored sample, releases
    reserved unacknowledged data, and hands the last job outcome to the new stage first."""
    Counting.made = 0
    first = build(storage_database, job_samples=2, stage=Counting)
    records = [
        call("a.c", session="a"),
        report("a", "a.c"),
        call("b.c", session="b"),
        report("b", "b.c"),
    ]
    for record in records:
        first.push(record)
    assert Counting.made == 2
    reserved = first.build_job_data(2)
    assert ids(reserved) == ["a:0", "b:0"]
    store = TrainerSamples(storage_database, "s")
    store.record_job_outcome("c", {"job_id": "j0", "component": "c", "event": "finished"})

    seen: list[JobOutcome] = []

    class Remembering(Counting):
        def job_ended(self, outcome: JobOutcome) -> None:
            seen.append(outcome)

    second = build(storage_database, job_samples=2, stage=Remembering)
    assert seen == [JobOutcome("j0", "c", "finished")]
    for record in records:  # the trainer's cursor replays from the start
        second.push(record)
    assert Counting.made == 2
    assert ids(second.build_job_data(2)) == ["a:0", "b:0"]
    second.push(call("c.c", session="c", turns=2))
    second.push(report("c", "c.c"))
    assert Counting.made == 3


def test_given_back_samples_return_to_the_buffer(storage_database: Database) -> None:
    """rule: P-PIPE-8 P-PIPE-9 P-REP-6 P-MODE-8 a submission gives back whole groups: the commit
    consumes every other reserved sample (submitted or removed) and the given-back ones train
    in a later job, whose id no commit used, also after a restart."""
    pipeline = build(storage_database, job_samples=1, buffer_size=10, group_size=2)
    for name, group in (("a", "g1"), ("b", "g1"), ("c", "g2"), ("d", "g2")):
        feed(pipeline, name, group=group)
    feed(pipeline, "e")
    data = pipeline.build_job_data(1)
    assert ids(data) == ["a:0", "b:0", "c:0", "d:0", "e:0"]
    assert data is not None
    # a plugin submits g2, removes e (consumed untrained, P-REP-6) and gives g1 back
    submitted = JobData(data.id, data.samples[2:4], given_back=("a:0", "b:0"))
    acknowledged = pipeline.acknowledge(data.id, given_back=submitted.given_back)
    assert acknowledged == ("sample:c:0", "sample:d:0", "sample:e:0")
    assert train_counts(storage_database, "c") == {"c:0": 1, "d:0": 1, "e:0": 1}
    assert [s.sample_id for s in pipeline.buffer()] == ["a:0", "b:0"]
    again = pipeline.build_job_data(1)
    assert ids(again) == ["a:0", "b:0"]
    assert again is not None
    assert again.id == f"{data.id}.1"  # the first id is committed: a commit takes an id once
    assert pipeline.acknowledge(again.id, given_back=("a:0", "b:0")) == ()
    restarted = build(storage_database, job_samples=1, buffer_size=10, group_size=2)
    last = restarted.build_job_data(1)
    assert ids(last) == ["a:0", "b:0"]
    assert last is not None
    assert last.id == f"{data.id}.2"
    assert restarted.acknowledge(last.id) == ("sample:a:0", "sample:b:0")
    assert train_counts(storage_database, "c") == dict.fromkeys(
        ["a:0", "b:0", "c:0", "d:0", "e:0"], 1
    )
    assert restarted.build_job_data(1) is None


def test_given_back_is_checked(storage_database: Database) -> None:
    """rule: P-PIPE-9 P-BUF-5 a submission may give back only samples it reserved, and only
    whole groups; a refused acknowledgement commits nothing and keeps the reservation. Job
    data never both submits and gives back a sample."""
    pipeline = build(storage_database, job_samples=1, buffer_size=10, group_size=2)
    for name in ("a", "b"):
        feed(pipeline, name, group="g1")
    feed(pipeline, "c")
    data = pipeline.build_job_data(1)
    assert data is not None
    with pytest.raises(GivenBackError, match=r"did not reserve: \['zz'\]"):
        pipeline.acknowledge(data.id, given_back=("zz",))
    with pytest.raises(GivenBackError, match="part of group"):
        pipeline.acknowledge(data.id, given_back=("a:0",))
    assert train_counts(storage_database, "c") == {}
    assert pipeline.consumed_sample_ids(data.id, ("c:0",)) == ("a:0", "b:0")
    assert pipeline.acknowledge(data.id, given_back=("c:0",)) == ("sample:a:0", "sample:b:0")
    assert [s.sample_id for s in pipeline.buffer()] == ["c:0"]
    with pytest.raises(ValueError, match=r"both submits and gives back \['c:0'\]"):
        JobData("x", data.samples, given_back=("c:0",))


def test_a_reservation_carries_its_data_to_commit_or_release(storage_database: Database) -> None:
    """rule: P-PIPE-7 P-PIPE-8 P-PIPE-9 reserve() returns the job data with its reserved samples;
    a replacement with another id is refused; releasing puts the samples back, committing
    consumes the reservation less what the data gives back, and a reservation ends once."""
    pipeline = build(storage_database, job_samples=1, buffer_size=10, group_size=2)
    for name in ("a", "b"):
        feed(pipeline, name, group="g1")
    feed(pipeline, "c")
    reservation = pipeline.reserve()
    assert reservation is not None
    assert reservation.sample_ids == ("a:0", "b:0", "c:0")
    assert reservation.data_id == reservation.data.id
    assert reservation.instruction_id is None
    assert pipeline.reserve() is None  # every sample is reserved
    with pytest.raises(ValueError, match="keeps the reserved data's id"):
        reservation.with_data(JobData("other", reservation.data.samples))
    reservation.release()
    again = pipeline.reserve()
    assert again is not None
    assert again.data.id == reservation.data.id  # released data keeps its id
    replaced = again.with_data(JobData(again.data.id, again.data.samples[:2], given_back=("c:0",)))
    assert replaced.consumed_sample_ids == ("a:0", "b:0")
    assert replaced.commit() == ("sample:a:0", "sample:b:0")
    assert train_counts(storage_database, "c") == {"a:0": 1, "b:0": 1}
    with pytest.raises(KeyError):
        replaced.commit()
    assert [s.sample_id for s in pipeline.buffer()] == ["c:0"]


def test_a_reservation_builds_its_buffer_once(
    storage_database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reserve() decides and fills the job from one buffer: one read of the samples stored
    since the last call, one check of the buffer's uploads against the store."""
    pipeline = build(storage_database, job_samples=2, buffer_size=10)
    feed(pipeline, "a")
    upload = {"schema_version": "ATIF-v1.4", "steps": []}
    TrainerSamples(storage_database, "s").add_upload(
        NewSample("up1", "trajectory", {"trajectory": upload})
    )
    reads: Counter[str] = Counter()
    for name in ("untrained", "get"):
        read = getattr(pipeline.samples, name)

        def counted(*args: Any, _read: Any = read, _name: str = name, **kwargs: Any) -> Any:
            reads[_name] += 1
            return _read(*args, **kwargs)

        monkeypatch.setattr(pipeline.samples, name, counted)
    reservation = pipeline.reserve()
    assert reservation is not None
    assert reservation.sample_ids == ("a:0", "up1")
    assert reads == {"untrained": 1, "get": 1}


def test_staleness_is_judged_once_per_sample_and_again_when_a_new_artifact_is_served(
    storage_database: Database,
) -> None:
    """rule: P-BUF-4 P-STALE-6 the pipeline keeps each verdict: computing the buffer again asks
    nothing of the stage; a new served artifact has every untrained sample judged again (a
    rollback makes a stale sample fresh). What changed is written to the stale marks."""

    class Counted(ReportSamples):
        asked: list[str] = []

        def is_stale(self, sample: Sample) -> bool:
            Counted.asked.append(str(sample.sample_id))
            return super().is_stale(sample)

    pipeline = build(storage_database, job_samples=1, buffer_size=10, stage=Counted)
    marks = StaleSamples(storage_database, "s")
    pipeline.observe_serving_artifact_id("old")
    feed(pipeline, "a", artifact="old")
    feed(pipeline, "b", artifact="new")
    assert [s.sample_id for s in pipeline.buffer()] == ["a:0"]  # b's artifact is unknown
    pipeline.buffer()
    pipeline.status()
    assert sorted(Counted.asked) == ["a:0", "b:0"]
    pipeline.write_stale_marks()
    assert marks.marked(["a:0", "b:0"]) == {"b:0": ("c",)}
    pipeline.observe_serving_artifact_id("new")
    assert [s.sample_id for s in pipeline.buffer()] == ["b:0"]  # a is 1 behind, b is fresh
    assert sorted(Counted.asked) == ["a:0", "a:0", "b:0", "b:0"]
    pipeline.observe_serving_artifact_id("old")  # a rollback: a is fresh again
    assert [s.sample_id for s in pipeline.buffer()] == ["a:0"]
    pipeline.write_stale_marks()
    assert marks.marked(["a:0", "b:0"]) == {"b:0": ("c",)}
    pipeline.observe_serving_artifact_id("new")
    pipeline.write_stale_marks()
    assert marks.marked(["a:0", "b:0"]) == {"a:0": ("c",)}
