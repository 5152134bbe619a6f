"""Rules that a hand-made mutant of the code once broke while the whole suite still passed: each
test here fails with that mutant (recorded beside it) and passes with the code as it is.

- P-STALE-5: the trainer tells the pipeline what it serves before each reservation, so a sample
  made under an artifact the trainer has since replaced is left out (mutant: the trainer never
  calls ``observe_serving_artifact_id``).
- P-SET-10: an abort in *any* call of a record set rejects the set (mutant: only the last call's
  abort counts).
- P-BUF-3: the buffer keeps the first sample's kind when two kinds both count (mutant: the last
  sample's kind).
- P-SET-13: a record holds the exchange with the provider and nothing made for training.
- P-STG-15: the stages compute nothing numeric: rewards reach the job as they were given
  (mutant: a stage centres a group's rewards, an advantage), and no stage module imports a
  numeric library.

Found by ``scripts/mutation`` (docs/testing.md) on ``record2sample/stage.py``:

- P-STALE-3: ``max_staleness`` defaults to 0 in the base class too (mutant: 1).
- P-STALE-4: a task sample's age counts from the artifact in its ``metadata.training``
  (mutant: a task sample names no artifact, so it is always stale).
- P-SLOW-2: the base class answers ``False`` for background work (mutant: ``None``).

And on ``train/pipeline.py``:

- P-PIPE-11: ``made_samples()`` stores what the stage made (mutant: it stores nothing).
- P-MODE-1: a pipeline's mode is ``auto`` unless set (mutant: the property answers ``None``).
- P-PIPE-12: a recorded job outcome is durable and replayed to the next pipeline's stage
  (mutant: ``record_job_outcome`` records nothing).
- P-MODE-5, P-MODE-10: manual mode is not ready without an instruction, and an instruction
  given twice is queued once (mutants: ready without one; queued twice).
- P-BUF-2: an uploaded task counts only where the stage takes imported tasks (mutant: always).
- P-MODE-3: an unread instruction keeps the client's parameters (mutant: they are lost).
- P-MODE-5, P-BUF-5: a chosen sample of a group is in the manual buffer once, with its mate
  (mutant: twice).
- P-PIPE-9: a recovered commit counts once and answers whether it committed (mutant: ``None``).
"""

from __future__ import annotations

import ast
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from reef.components.interface import Artifact, JobHandle
from reef.core.job_data import (
    JobData,
    JobOutcome,
    TaskSample,
    TrainingInstruction,
    TrajectorySample,
    sample_body,
)
from reef.core.records import InferenceRecord, RecordFormatError, from_json, to_json
from reef.pipeline_context import PipelineContext
from reef.recipe.grouped.processor import GroupedJobData
from reef.record2sample import Record2Sample, ReportSamples
from reef.record2sample.no_samples import NoSamples
from reef.storage import Database, NewSample, TrainerSamples
from reef.testing.components import RecordingComponent, train_until_submitted
from reef.testing.records import call, report
from reef.train.pipeline import TrainingPipeline
from reef.train.trainer import TrainerParts

SRC = Path(__file__).resolve().parents[1] / "src" / "reef"


# -- P-STALE-5 ---------------------------------------------------------------------------------


class PublishingComponent(RecordingComponent):
    """Publishes a new artifact after each finished job: ``art-0`` before any, then ``art-1``..."""

    def __init__(self, expected_jobs: int) -> None:
        super().__init__(expected_jobs)
        self.finished = 0
        self._lock = threading.Lock()

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        with self._lock:
            self.finished += 1
        return JobOutcome(handle.job_id, self.name, "finished")

    def publish(self) -> Artifact:
        with self._lock:
            return Artifact(f"art-{self.finished}", Path("."))


def made_under(artifact: str, reward: float) -> dict[str, Any]:
    """A trajectory sample's body whose last call was answered by ``artifact``."""
    trajectory = {
        "steps": [],
        "extra": {"reef": {"records": [{"id": "c", "artifact_id": artifact}]}},
    }
    return sample_body(TrajectorySample(trajectory, reward=reward))


def test_the_trainer_leaves_out_samples_of_an_artifact_it_no_longer_serves(
    storage_database: Database,
) -> None:
    """rule: P-STALE-5 -- at each reservation the trainer gives the pipeline the artifact it
    serves. Group g1 trains under art-0; the job's end publishes art-1; g2, made under art-0,
    is now one artifact behind (max_staleness 0) and is left out, while g3, made under art-1,
    trains."""
    samples = TrainerSamples(storage_database, "s")
    samples.register_trainer("c", reads_uploads=False)
    for group, artifact in (("g1", "art-0"), ("g2", "art-0"), ("g3", "art-1")):
        unit = [
            NewSample(f"{group}-{i}", "trajectory", made_under(artifact, float(i)))
            for i in range(2)
        ]
        samples.add_record_samples("c", unit, [f"record-{group}"])
    component = PublishingComponent(expected_jobs=2)

    def build(database: Database) -> TrainerParts:
        context = PipelineContext("s", "c", has_runtime_loader=True)
        pipeline = TrainingPipeline(
            NoSamples(context, max_staleness=0),
            GroupedJobData(context, job_samples=2, buffer_size=2),
            samples=TrainerSamples(database, "s"),
            context=context,
        )
        return TrainerParts(pipeline, component)

    train_until_submitted(storage_database, component, build)
    jobs = [[str(s.sample_id) for s in data.samples] for data in component.submitted]
    assert jobs[:2] == [["g1-0", "g1-1"], ["g3-0", "g3-1"]]
    assert {s.id for s in samples.untrained("c")} == {"g2-0", "g2-1"}


# -- P-SET-10 ----------------------------------------------------------------------------------


def test_an_abort_in_an_earlier_call_rejects_the_whole_set() -> None:
    """rule: P-SET-10 -- the first call of the trajectory was broken off by the engine, the last
    one was not: the report and both calls still end as engine aborts."""
    stage = ReportSamples(PipelineContext("s", "c"))
    for record in (call("c1", 1, finish="abort"), call("c2", 2), report("r", "c2")):
        stage.push(record)
    assert stage.ready_units() == ()
    assert stage.ended_records() == {
        "c1": "engine_abort",
        "c2": "engine_abort",
        "r": "engine_abort",
    }


# -- P-BUF-3 -----------------------------------------------------------------------------------


class BothKinds(GroupedJobData):
    """A sample-to-job stage with job parameters for trajectories and for tasks."""

    job_parameter_kinds = frozenset({"trajectory", "task"})


def test_the_buffer_keeps_the_first_kind_when_both_count(storage_database: Database) -> None:
    """rule: P-BUF-3 -- two kinds that both count: the buffer is of the first sample's kind,
    whichever kind that is."""
    for trainer, first in (("traj-first", "trajectory"), ("task-first", "task")):
        context = PipelineContext("s", trainer)
        store = TrainerSamples(storage_database, "s")
        store.register_trainer(trainer, reads_uploads=False)
        pipeline = TrainingPipeline(
            NoSamples(context),
            BothKinds(context, job_samples=1, buffer_size=10),
            samples=TrainerSamples(storage_database, "s"),
            context=context,
        )
        trajectory = NewSample(
            f"{trainer}-t", "trajectory", sample_body(TrajectorySample({"steps": []}, reward=1.0))
        )
        task = TaskSample(f"{trainer}-k", {"instruction": "x"})
        as_task = NewSample(f"{trainer}-k", "task", sample_body(task))
        ordered = [trajectory, as_task] if first == "trajectory" else [as_task, trajectory]
        for sample in ordered:
            store.add_samples(trainer, [sample])
        assert [s.kind for s in pipeline.buffer()] == [first], trainer
        pipeline.close(1)


# -- P-SET-13 ----------------------------------------------------------------------------------


def test_a_record_holds_the_exchange_and_nothing_made_for_training() -> None:
    """rule: P-SET-13 -- an inference record is the request and the response as the provider
    gave them, with where and when: no token ids, no log-probabilities of its own, no tensors.
    Its stored JSON has exactly these keys, the response comes back as it was, and a body
    carrying training data is not a record."""
    response = {
        "choices": [
            {
                "message": {"role": "assistant", "content": "hi"},
                "logprobs": {"content": [{"token": "hi", "logprob": -0.1}]},
            }
        ]
    }
    record = InferenceRecord("c1", "s", {"messages": [{"role": "user", "content": "q"}]}, response)
    exchange = {"id", "scenario", "api_format", "request", "response", "tags", "artifact_id",
                "started_at", "ended_at", "aborted"}  # fmt: skip
    assert {field.name for field in attrs.fields(InferenceRecord)} == exchange | {"kind"}
    stored = to_json(record)
    assert set(stored) == exchange | {"kind"}
    assert stored["response"] == response
    assert from_json(stored) == record
    for tensor in ("token_ids", "logprobs", "advantages", "loss_mask"):
        with pytest.raises(RecordFormatError, match=tensor):
            from_json({**stored, tensor: [1, 2, 3]})


# -- P-STG-15 ----------------------------------------------------------------------------------


def test_stages_hand_rewards_on_as_given(storage_database: Database) -> None:
    """rule: P-STG-15 -- a group's rewards reach the job as the feedback gave them: no centring,
    scaling or advantage is computed before the training component's objective."""
    context = PipelineContext("s", "c")
    store = TrainerSamples(storage_database, "s")
    store.register_trainer("c", reads_uploads=False)
    rewards = [0.0, 1.0, 1.0, 0.25]
    unit = [
        NewSample(f"g-{i}", "trajectory", sample_body(TrajectorySample({"steps": []}, reward=r)))
        for i, r in enumerate(rewards)
    ]
    store.add_record_samples("c", unit, ["record-g"])
    pipeline = TrainingPipeline(
        NoSamples(context),
        GroupedJobData(context, job_samples=4, buffer_size=10),
        samples=store,
        context=context,
    )
    data = pipeline.build_job_data(1)
    assert isinstance(data, JobData)
    assert [s.reward for s in data.samples] == rewards
    assert all(not _numeric_keys(s.metadata) for s in data.samples)
    pipeline.close(1)


def _numeric_keys(metadata: Mapping[str, Any]) -> list[str]:
    return [k for k in metadata if k in {"advantage", "advantages", "loss", "baseline"}]


def test_no_stage_module_imports_a_numeric_library() -> None:
    """rule: P-STG-15 -- the stage packages import no numeric library (advantages and losses
    are the component's objective, which may use them)."""
    numeric = {"numpy", "torch", "scipy", "statistics", "jax", "pandas"}
    found = []
    for package in ("record2sample", "sample2job", "recipe"):
        for path in sorted((SRC / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                found += [
                    f"{path.relative_to(SRC)}: {n}" for n in names if n.split(".")[0] in numeric
                ]
    assert found == []


# -- found by scripts/mutation on record2sample/stage.py ---------------------------------------


class OwnStage(Record2Sample):
    """A recipe's stage that leaves ``max_staleness`` to the base class."""


@pytest.mark.parametrize("stage_class", [OwnStage, ReportSamples])
def test_max_staleness_defaults_to_zero(stage_class: type[Record2Sample]) -> None:
    """rule: P-STALE-3 -- without ``max_staleness`` only the served artifact's data trains: a
    sample one artifact behind is stale (mutant: the base class's default is 1)."""
    stage = stage_class(PipelineContext("s", "c", has_runtime_loader=True))
    assert stage.max_staleness == 0
    for artifact in ("art-0", "art-1"):
        stage.observe_serving_artifact_id(artifact)
    assert stage.is_stale(_task_made_under("art-0"))
    assert not stage.is_stale(_task_made_under("art-1"))


def test_a_stage_runs_no_background_work_unless_it_says_so() -> None:
    """rule: P-SLOW-2 -- the base class runs no background work: ``False``, which the trainer's
    status shows as such (mutant: ``None``, shown as ``null``)."""
    assert OwnStage(PipelineContext("s", "c")).background_jobs_running() is False


def test_a_task_rollout_is_judged_by_the_artifact_it_names() -> None:
    """rule: P-STALE-4 -- a task sample names its artifact in ``metadata.training.artifact_id``
    and its age is counted from it (mutant: the stage reads no artifact from a task sample, so
    every task sample is stale once an artifact is served, P-STALE-8)."""
    stage = ReportSamples(PipelineContext("s", "c", has_runtime_loader=True), max_staleness=1)
    for artifact in ("art-0", "art-1", "art-2"):
        stage.observe_serving_artifact_id(artifact)
    assert not stage.is_stale(_task_made_under("art-2"))
    assert not stage.is_stale(_task_made_under("art-1"))
    assert stage.is_stale(_task_made_under("art-0"))


def _task_made_under(artifact: str) -> TaskSample:
    return TaskSample("t", {}, metadata={"training": {"artifact_id": artifact}}, sample_id=artifact)


# -- found by scripts/mutation on train/pipeline.py --------------------------------------------


class MakingStage(NoSamples):
    """Makes one named sample from no record set; keeps the outcomes it is told of."""

    def __init__(self, context: PipelineContext) -> None:
        super().__init__(context)
        self.ended: list[JobOutcome] = []
        self.made = [("made-1", TrajectorySample({"steps": []}, reward=1.0))]

    def made_samples(self) -> tuple[tuple[str, Any], ...]:
        made, self.made = tuple(self.made), []
        return made

    def job_ended(self, outcome: JobOutcome) -> None:
        self.ended.append(outcome)


def _making_pipeline(database: Database) -> TrainingPipeline:
    context = PipelineContext("s", "c")
    return TrainingPipeline(
        MakingStage(context),
        GroupedJobData(context, job_samples=1, buffer_size=10),
        samples=TrainerSamples(database, "s"),
        context=context,
    )


def test_made_samples_stores_what_the_stage_made(storage_database: Database) -> None:
    """rule: P-PIPE-11 P-MODE-1 -- ``made_samples()`` stores the stage's named samples (mutant:
    it stores nothing); and a pipeline's mode is ``auto`` unless set (mutant: no mode)."""
    pipeline = _making_pipeline(storage_database)
    assert pipeline.training_mode == "auto"
    pipeline.made_samples()
    assert [s.id for s in TrainerSamples(storage_database, "s").untrained("c")] == ["made-1"]
    pipeline.close(1)


def test_a_recorded_job_outcome_is_replayed_to_the_next_pipeline(
    storage_database: Database,
) -> None:
    """rule: P-PIPE-12 -- ``record_job_outcome`` makes the end durable: a pipeline built after a
    restart hands it to its stage's ``job_ended`` (mutant: nothing is recorded)."""
    before = _making_pipeline(storage_database)
    outcome = JobOutcome("job-1", "c", "finished", metrics={"loss": 0.5})
    before.record_job_outcome(outcome)
    before.close(1)
    after = _making_pipeline(storage_database)
    assert after.last_job_outcome() == outcome
    assert isinstance(after.record2sample, MakingStage)
    assert after.record2sample.ended == [outcome]
    after.close(1)


class InstructionReader(GroupedJobData):
    """Runs an instruction with an empty manual buffer (P-MODE-6)."""

    reads_instructions = True


def test_manual_waits_for_an_instruction_and_queues_each_once(storage_database: Database) -> None:
    """rule: P-MODE-5 P-MODE-10 -- in manual mode nothing is ready without an instruction, even
    for a stage that reads instructions (mutant: ready without one); an instruction given twice
    in one call is queued once (mutant: twice)."""
    context = PipelineContext("s", "c", training_mode="manual")
    pipeline = TrainingPipeline(
        ReportSamples(context),
        InstructionReader(context, job_samples=1),
        samples=TrainerSamples(storage_database, "s"),
        context=context,
    )
    assert pipeline.ready(1) is False
    pipeline.queue_instructions([TrainingInstruction("q1"), TrainingInstruction("q1")])
    assert pipeline.buffered_requests == 1
    assert pipeline.ready(1) is True
    pipeline.close(1)


@pytest.mark.parametrize("accepts", [False, True])
def test_an_imported_task_counts_only_where_the_stage_takes_imported_tasks(
    storage_database: Database, accepts: bool
) -> None:
    """rule: P-BUF-2 -- an uploaded train task enters the buffer only when the sample-to-job
    stage sets ``accepts_imported_tasks`` (mutant: it enters regardless)."""

    class Stage(BothKinds):
        accepts_trajectories = True
        accepts_imported_tasks = accepts

    context = PipelineContext("s", "c")
    pipeline = TrainingPipeline(
        NoSamples(context),
        Stage(context, job_samples=1, buffer_size=10),
        samples=TrainerSamples(storage_database, "s"),
        context=context,
    )
    task = TaskSample("imported", {"instruction": "x"})
    TrainerSamples(storage_database, "s").add_upload(
        NewSample("imported", "task", sample_body(task))
    )
    assert [s.kind for s in pipeline.buffer()] == (["task"] if accepts else [])
    pipeline.close(1)


def test_an_unread_instruction_keeps_its_text_and_parameters(storage_database: Database) -> None:
    """rule: P-MODE-3 -- the pipeline reads a stored instruction with the client's text and
    parameters (mutant: the parameters are lost)."""
    pipeline = TrainingPipeline(
        ReportSamples(PipelineContext("s", "c")),
        GroupedJobData(PipelineContext("s", "c"), job_samples=1),
        samples=TrainerSamples(storage_database, "s"),
        context=PipelineContext("s", "c"),
    )
    TrainerSamples(storage_database, "s").enqueue_instruction(
        "q1", {"text": "write tests", "parameters": {"steps": 2}}
    )
    assert pipeline.unread_instructions() == (
        TrainingInstruction("q1", text="write tests", parameters={"steps": 2}),
    )
    pipeline.close(1)


def test_a_chosen_sample_of_a_group_is_in_the_manual_buffer_once(
    storage_database: Database,
) -> None:
    """rule: P-MODE-5 P-BUF-5 -- a client's choice of one sample of a unit brings its group-mate
    along, and the chosen sample stays once (mutant: the chosen sample is its own mate, twice in
    the buffer)."""
    context = PipelineContext("s", "c", training_mode="manual")
    store = TrainerSamples(storage_database, "s")
    pipeline = TrainingPipeline(
        NoSamples(context),
        GroupedJobData(context, job_samples=2, buffer_size=10),
        samples=store,
        context=context,
    )
    unit = [
        NewSample(
            f"u-{i}", "trajectory", sample_body(TrajectorySample({"steps": []}, reward=float(i)))
        )
        for i in range(2)
    ]
    store.add_record_samples("c", unit, ["r1"])
    pipeline.insert_into_buffer(["u-0"])
    assert [s.sample_id for s in pipeline.buffer()] == ["u-0", "u-1"]
    pipeline.close(1)


def test_a_recovered_commit_counts_once_and_says_whether_it_committed(
    storage_database: Database,
) -> None:
    """rule: P-PIPE-9 -- recovery commits a job a crash left uncommitted: one train count per
    sample, and asked again it commits nothing and answers False (mutant found by
    scripts/mutation: the answer is ``None`` whether or not it committed)."""
    pipeline = _making_pipeline(storage_database)
    pipeline.made_samples()
    assert pipeline.commit_recovered("s:data:0", ["made-1"], None) is True
    assert pipeline.commit_recovered("s:data:0", ["made-1"], None) is False
    store = TrainerSamples(storage_database, "s")
    assert store.train_counts("c", ["made-1"]) == {"made-1": 1}
    pipeline.close(1)
