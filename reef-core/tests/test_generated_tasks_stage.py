"""GeneratedTaskSamples and GeneratedTaskJobData on a real sample store and task store.

Each test runs the recipe's two stages in a ``TrainingPipeline`` as the trainer does: rounds
run on the stage's worker and end at a later ``produce``; task jobs are built, acknowledged and
ended with the metrics a training component reports (``rollout_rewards``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from doubles.generators import ArithmeticTasks, WordTasks

from reef.core.harbor import HarborTask
from reef.core.job_data import JobData, JobOutcome, TaskSample
from reef.core.records import InferenceRecord, Record
from reef.recipe.generated_tasks import (
    FailedTask,
    HeldOutTask,
    RejectedTask,
    RolledOutTask,
    TaskValidationResult,
)
from reef.recipe.generated_tasks.processor import GeneratedTaskJobData, GeneratedTaskSamples
from reef.record2sample.generator import TaskGenerationRequest
from reef.storage import Database, TaskStorage, TaskStore
from reef.testing import pipeline_context, training_pipeline
from reef.testing.records import call, report

TAG = ("source", "yes")


class Harness:
    """The recipe's pipeline of scenario ``s``, trainer ``c``; a restart is a new harness on
    the same database."""

    def __init__(
        self, database: Database, generator: ArithmeticTasks, buffer_size: int, **settings: Any
    ) -> None:
        self.database = database
        self.generator = generator
        self.storage = TaskStorage(database, "s")
        context = pipeline_context(task_storage=self.storage, has_runtime_loader=False)
        self.stage = GeneratedTaskSamples(context, generator, **settings)
        self.jobs = GeneratedTaskJobData(context, record2sample=self.stage, buffer_size=buffer_size)
        self.pipeline = training_pipeline(self.stage, self.jobs, database)

    def settle(self, rounds: int = 1) -> None:
        """Run the trainer's steps until ``rounds`` rounds started and every one ended."""
        for _ in range(rounds):
            self.pipeline.produce()
            while self.stage.background_jobs_running():
                self.stage.worker.wait(10)
                self.pipeline.produce()

    def buffer_names(self) -> list[str]:
        """The train tasks that wait to train, in store order."""
        return [s.body["name"] for s in self.pipeline.samples.untrained("c")]

    def build(self) -> JobData:
        data = self.pipeline.build_job_data(self.jobs.job_samples)
        assert data is not None
        self.pipeline.acknowledge(data.id)
        return data

    def end(
        self,
        data: JobData,
        rewards: Callable[[str], list[float] | None] = lambda name: [1.0, 0.0],
        *,
        error: str | None = None,
    ) -> None:
        ran = {}
        for sample in data.samples:
            assert isinstance(sample, TaskSample)
            value = rewards(sample.name)
            if value is not None:
                ran[sample.name] = value
        outcome = JobOutcome(
            data.id,
            "c",
            "failed" if error else "finished",
            {} if error else {"rollout_rewards": ran},
            error,
        )
        self.pipeline.samples.record_job_outcome("c", attrs.asdict(outcome))
        self.pipeline.job_ended(outcome)

    def train_all(self) -> None:
        while self.pipeline.ready(self.jobs.job_samples):
            self.end(self.build())

    def close(self) -> None:
        self.pipeline.close(10)


@pytest.fixture
def harnesses(storage_database: Database) -> Iterator[list[Harness]]:
    made: list[Harness] = []
    yield made
    for harness in made:
        harness.close()


def _harness(
    database: Database,
    made: list[Harness],
    generator: ArithmeticTasks,
    *,
    buffer_size: int = 1,
    **settings: Any,
) -> Harness:
    """The recipe's pipeline; by default each task job trains one task."""
    harness = Harness(database, generator, buffer_size, **settings)
    made.append(harness)
    return harness


def _tagged(cid: str, turns: int, session: str, tagged: bool = True) -> InferenceRecord:
    record = call(cid, turns, session=session)
    return attrs.evolve(record, tags=dict([TAG])) if tagged else record


#: The settings of rounds that each take one source session (calls tagged ``TAG``).
ONE_SESSION_A_ROUND: dict[str, Any] = {"source_records_per_round": 1, "source_tag": "=".join(TAG)}


def _one_session() -> list[Record]:
    """Source session ``a``: a tagged call ``c1`` and the report ``r1`` that ends it."""
    return [_tagged("c1", 1, "a"), report("r1", "c1")]


# -- rounds and generations ------------------------------------------------------------------


# rule: P-TASK-8 P-TASK-12 P-TASK-21
def test_a_round_runs_on_the_worker_and_its_train_tasks_enter_the_buffer(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    threads: list[str] = []

    class Watched(ArithmeticTasks):
        async def generate(self, request: TaskGenerationRequest) -> tuple[HarborTask, ...]:
            threads.append(threading.current_thread().name)
            return await super().generate(request)

    harness = _harness(storage_database, harnesses, Watched(tasks_per_generation=3), buffer_size=4)
    assert harness.buffer_names() == []
    harness.pipeline.produce()  # the pipeline's first look starts the first round
    assert harness.stage.status()["task_generation"]["generation_in_flight"] == 1
    harness.settle()
    assert threads
    assert threads[0] != threading.current_thread().name
    assert harness.buffer_names() == ["add-g1-0", "add-g1-1", "add-g1-2"]
    stored = harness.pipeline.samples.get(["generated-tasks/add-g1-0"])
    assert [s.kind for s in stored] == ["task"]
    # A round is no record set: nothing was consumed, nothing ended.
    assert harness.stage.status()["ended_records"] == {}


# rule: P-TASK-21 P-TASK-8
def test_the_next_round_waits_for_jobs_per_round_jobs(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database,
        harnesses,
        ArithmeticTasks(tasks_per_generation=3),
        jobs_per_round=2,
        refill_tasks=3,
    )
    harness.settle()
    harness.end(harness.build())
    harness.settle()
    assert [r.generation for r in harness.generator.generate_calls] == [1]
    harness.end(harness.build())
    harness.settle()
    assert [r.generation for r in harness.generator.generate_calls] == [1, 2]


# rule: P-TASK-21
def test_the_next_round_waits_until_fewer_than_refill_tasks_wait(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database, harnesses, ArithmeticTasks(tasks_per_generation=3), refill_tasks=2
    )
    harness.settle()
    harness.end(harness.build())
    harness.settle()
    assert [r.generation for r in harness.generator.generate_calls] == [1]  # 2 still wait
    running = harness.build()  # a task in a running job does not wait
    harness.settle()
    assert [r.generation for r in harness.generator.generate_calls] == [1, 2]
    harness.end(running)


# rule: P-TASK-21
def test_a_round_without_a_train_task_is_followed_at_once(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database, harnesses, ArithmeticTasks(tasks_per_generation=0), rounds=3
    )
    harness.settle(rounds=5)
    assert [r.generation for r in harness.generator.generate_calls] == [1, 2, 3]


# rule: P-TASK-22 P-TASK-21
def test_the_rounds_limit_counts_finished_generations(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database, harnesses, ArithmeticTasks(tasks_per_generation=1), rounds=2
    )
    for _ in range(4):
        harness.settle()
        harness.train_all()
    assert [r.generation for r in harness.generator.generate_calls] == [1, 2]
    assert harness.stage.status()["task_generation"]["rounds"] == 2


# rule: P-TASK-10 P-TASK-3
def test_a_generate_that_fails_to_run_is_retried_within_the_attempts(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database,
        harnesses,
        ArithmeticTasks(failing_generate_calls=1),
        generation_attempts=2,
    )
    harness.settle()
    assert [r.generation for r in harness.generator.generate_calls] == [1, 1]
    assert harness.buffer_names() == ["add-g1-0", "add-g1-1"]


# rule: P-TASK-10 P-TASK-22 P-TASK-23 P-TASK-9
def test_a_generation_out_of_attempts_is_finished_by_the_next_round_from_its_candidates(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    failing = {"left": 3}

    class FlakyChecks(ArithmeticTasks):
        async def validate(self, task: HarborTask) -> TaskValidationResult:
            if failing["left"]:
                failing["left"] -= 1
                raise ConnectionError("the sandbox is down")
            return await super().validate(task)

    harness = _harness(storage_database, harnesses, FlakyChecks(), generation_attempts=2, rounds=1)
    # Round 1 runs out of attempts and ends without a task; round 2 follows at once and
    # finishes generation 1 from its saved candidates, though the rounds limit is reached.
    harness.settle()
    status = harness.stage.status()
    assert "generation 1 did not finish" in status["task_generation"]["last_error"]
    assert "the sandbox is down" in status["task_generation"]["last_error"]
    assert status["task_generation"]["rounds"] == 1  # an out-of-attempts round counts once
    store = harness.storage.open("generated-tasks")
    assert len(store.get("candidates:1")) == 2  # saved before validation, generated once
    assert [r.generation for r in harness.generator.generate_calls] == [1]
    assert harness.buffer_names() == ["add-g1-0", "add-g1-1"]


# rule: P-TASK-4 P-TASK-9
def test_a_task_that_fails_validation_is_rejected_and_never_published(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database,
        harnesses,
        ArithmeticTasks(tasks_per_generation=2, broken_oracle_every=2),
        rounds=1,
    )
    harness.settle()
    assert harness.buffer_names() == ["add-g1-0"]
    harness.train_all()
    harness.settle()
    (generation, results), *_ = harness.generator.recorded
    assert generation == 1
    rejected = results[1]
    assert isinstance(rejected, RejectedTask)
    assert "oracle" in rejected.reason
    assert harness.stage.status()["task_store"]["rejected"] == 1


# rule: P-TASK-11
def test_a_task_identical_to_a_published_one_is_rejected_as_a_duplicate(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    class Repeating(ArithmeticTasks):
        async def generate(self, request: TaskGenerationRequest) -> tuple[HarborTask, ...]:
            first = (await super().generate(attrs.evolve(request, generation=1)))[0]
            return (attrs.evolve(first, name=f"again-{request.generation}"),)

    harness = _harness(storage_database, harnesses, Repeating(), rounds=2)
    harness.settle()
    harness.train_all()
    harness.settle()
    harness.settle()
    assert harness.buffer_names() == []
    second = dict(harness.generator.recorded)[2]
    assert isinstance(second[0], RejectedTask)
    assert second[0].reason == "duplicate of published task 'again-1'"


# rule: P-TASK-3 P-TASK-23
def test_a_task_that_drops_its_requests_sources_is_rejected(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    class Forgetful(ArithmeticTasks):
        async def generate(self, request: TaskGenerationRequest) -> tuple[HarborTask, ...]:
            made = await super().generate(request)
            return tuple(attrs.evolve(t, source_agent_record_ids=()) for t in made)

    harness = _harness(
        storage_database,
        harnesses,
        Forgetful(tasks_per_generation=1),
        **ONE_SESSION_A_ROUND,
        rounds=1,
    )
    harness.pipeline.push_many(_one_session())
    harness.settle()
    assert harness.buffer_names() == []
    ((_, (result,)),) = harness.generator.recorded
    assert isinstance(result, RejectedTask)
    assert "source records" in result.reason


# -- splits ----------------------------------------------------------------------------------


# rule: P-TASK-23 P-TASK-9 P-TASK-6
def test_tasks_sharing_a_source_share_its_split_and_eval_tasks_never_train(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database,
        harnesses,
        ArithmeticTasks(tasks_per_generation=2),
        **ONE_SESSION_A_ROUND,
        eval_fraction=0.999,  # a fresh source all but surely lands in eval
        rounds=1,
    )
    harness.pipeline.push_many(_one_session())
    harness.settle()
    assert harness.buffer_names() == []  # both tasks share r1's sources: both in eval
    ((_, results),) = harness.generator.recorded  # no train task: results go out at once
    assert all(isinstance(r, HeldOutTask) for r in results)
    store = harness.storage.open("generated-tasks")
    assert {store.get("split:c1"), store.get("split:r1")} == {"eval"}


# rule: P-TASK-23
def test_a_task_whose_sources_joined_both_splits_is_rejected(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    class Mixed(ArithmeticTasks):
        async def generate(self, request: TaskGenerationRequest) -> tuple[HarborTask, ...]:
            (task,) = await super().generate(request)
            return (attrs.evolve(task, source_agent_record_ids=("train-src", "eval-src")),)

    harness = _harness(storage_database, harnesses, Mixed(tasks_per_generation=1), rounds=1)
    store = harness.storage.open("generated-tasks")
    store.put("split:train-src", "train")
    store.put("split:eval-src", "eval")
    harness.settle()
    ((_, (result,)),) = harness.generator.recorded
    assert isinstance(result, RejectedTask)
    assert "both splits" in result.reason


# -- source sessions -------------------------------------------------------------------------


# rule: P-TASK-20 P-TASK-19
def test_source_sessions_go_to_rounds_in_arrival_order_and_others_are_released(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database,
        harnesses,
        ArithmeticTasks(tasks_per_generation=1),
        source_records_per_round=2,
        source_tag="source=yes",
        jobs_per_round=1,
    )
    harness.pipeline.push_many(
        [
            _tagged("a1", 1, "a"),
            _tagged("a2", 2, "a"),
            _tagged("b1", 1, "b"),
            call("u1", 1, session="u"),  # untagged: a designer's own call, say
            _tagged("d1", 1, "d"),
            _tagged("e1", 1, "e"),
            report("ra", "a2"),
            report("ru", "u1"),  # not a source session: released unassembled
            report("rd", "d1", arm="treatment"),  # has a training arm: released
            report("rb", "b1"),
            report("re", "e1"),
        ]
    )
    harness.settle()
    (first,) = harness.generator.generate_calls
    assert first.source_record_ids == ("a1", "a2", "ra", "b1", "rb")
    ended = harness.stage.status()["ended_records"]
    assert ended["not_source_session"] == 4  # u1, ru, rd, d1
    assert ended["source_session_used"] == 5  # the round ended: its records are released
    harness.train_all()
    harness.settle()
    assert harness.generator.generate_calls[1].source_record_ids == ("e1", "re")
    harness.train_all()
    harness.settle()
    assert harness.generator.generate_calls[2].source_record_ids == ()


# rule: P-TASK-20 P-TASK-22
def test_a_session_after_the_last_round_is_released_at_once(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database,
        harnesses,
        ArithmeticTasks(tasks_per_generation=1),
        **ONE_SESSION_A_ROUND,
        rounds=1,
    )
    harness.settle()
    harness.pipeline.push_many(_one_session())
    assert harness.stage.status()["ended_records"] == {"after_last_round": 2}


# -- task jobs and results -------------------------------------------------------------------


# rule: P-TASK-15 P-TASK-5 P-TASK-17
def test_each_trained_task_gets_its_rewards_and_the_generation_goes_out_once(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database, harnesses, ArithmeticTasks(tasks_per_generation=3), refill_tasks=1
    )
    harness.settle()
    harness.end(harness.build(), lambda name: [0.5, 1.0])
    harness.end(harness.build(), lambda name: None)  # the job reported no rewards for it
    harness.settle()
    assert harness.generator.recorded == []  # one train task still has no result
    harness.end(harness.build(), error="the sampler crashed")
    harness.settle()
    ((generation, results),) = harness.generator.recorded
    assert generation == 1
    first, second, third = results
    assert first == RolledOutTask(first.task, (0.5, 1.0))
    assert isinstance(second, FailedTask)
    assert second.infrastructure_failure
    assert isinstance(third, FailedTask)
    assert third.infrastructure_failure
    assert "the sampler crashed" in third.error
    harness.settle()
    assert len(harness.generator.recorded) == 1


# rule: P-TASK-17 P-TASK-5
def test_generations_go_out_in_the_order_they_completed_and_a_failed_delivery_waits(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    calls: list[int] = []

    class Refusing(ArithmeticTasks):
        refuse = True

        async def record_results(self, results: Any, *, generation: int) -> None:
            calls.append(generation)
            if self.refuse and generation == 1:
                raise ConnectionError("the generator's store is down")
            await super().record_results(results, generation=generation)

    generator = Refusing(tasks_per_generation=2)
    harness = _harness(storage_database, harnesses, generator, refill_tasks=2)
    harness.settle()
    harness.end(harness.build())
    held = harness.build()  # generation 1's last task, in a job that ends later
    harness.settle()  # generation 2
    harness.end(harness.build())
    harness.end(harness.build())  # generation 2 is complete first
    harness.settle()
    harness.end(held)
    harness.settle()
    assert calls == [2, 1]
    assert "store is down" in harness.stage.status()["task_generation"]["last_error"]
    generator.refuse = False
    harness.end(harness.build())  # the next job sends generation 1 again
    harness.settle()
    assert calls == [2, 1, 1]
    assert [g for g, _ in generator.recorded] == [2, 1]


# rule: P-TASK-17
def test_a_generation_complete_while_a_delivery_runs_goes_out_after_it(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    """Generation 2 gets its last result while generation 1's results are still being sent,
    and no job comes after (the rounds limit): it goes out once the first delivery ended."""
    gate = threading.Event()

    class Slow(ArithmeticTasks):
        async def record_results(self, results: Any, *, generation: int) -> None:
            while generation == 1 and not gate.is_set():
                await asyncio.sleep(0.01)
            await super().record_results(results, generation=generation)

    generator = Slow(tasks_per_generation=1)
    harness = _harness(storage_database, harnesses, generator, rounds=2, refill_tasks=1)
    harness.settle()
    harness.end(harness.build())  # generation 1 complete: its delivery starts and waits
    harness.pipeline.produce()  # generation 2's round
    deadline = time.monotonic() + 30

    def taken_in() -> bool:
        # Complete in the store, and taken in by the trainer's thread (its tasks offered).
        seen = harness.stage.status()["task_generation"]
        return seen["completed_generations"] == 2 and seen["generation_in_flight"] is None

    while not taken_in():
        assert time.monotonic() < deadline, "generation 2 did not complete"
        time.sleep(0.01)
        harness.pipeline.produce()
    harness.end(harness.build())  # generation 2 complete while generation 1 is being sent
    gate.set()
    harness.settle()
    assert [g for g, _ in generator.recorded] == [1, 2]


# rule: P-TASK-16
def test_a_result_the_task_store_fails_to_save_is_saved_by_the_next_job(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database, harnesses, ArithmeticTasks(tasks_per_generation=2), refill_tasks=1
    )
    harness.settle()
    store = harness.stage.ledger.store
    real_put_new = store.put_new
    broken = {"on": True}

    def put_new(key: str, value: Any) -> bool:
        if broken["on"] and key.startswith("result:"):
            raise OSError("disk full")
        return real_put_new(key, value)

    store.put_new = put_new  # type: ignore[method-assign]
    harness.end(harness.build(), lambda name: [1.0, 1.0])
    assert harness.stage.status()["task_store"]["unsaved_results"] == 1
    broken["on"] = False
    harness.end(harness.build(), lambda name: [0.0, 0.0])
    harness.settle()
    ((_, results),) = harness.generator.recorded
    assert [r.rollout_rewards for r in results if isinstance(r, RolledOutTask)] == [
        (1.0, 1.0),
        (0.0, 0.0),
    ]


# -- restarts --------------------------------------------------------------------------------


# rule: P-TASK-24 P-TASK-16
def test_a_restart_continues_numbering_keeps_untrained_tasks_and_sends_missed_results(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    class Forgetting(ArithmeticTasks):
        async def record_results(self, results: Any, *, generation: int) -> None:
            raise ConnectionError("down")

    before = _harness(
        storage_database, harnesses, Forgetting(tasks_per_generation=2), refill_tasks=1
    )
    before.settle()
    before.end(before.build())
    before.end(before.build())
    before.settle()
    before.settle()  # generation 2 made; its tasks wait
    before.close()
    after = _harness(storage_database, harnesses, ArithmeticTasks(tasks_per_generation=2))
    assert after.buffer_names() == ["add-g2-0", "add-g2-1"]
    after.settle()  # sends generation 1's results, even though no job is due
    assert [g for g, _ in after.generator.recorded] == [1]
    after.train_all()
    after.settle()
    assert [g for g, _ in after.generator.recorded] == [1, 2]
    assert after.generator.generate_calls[0].generation == 3


# rule: P-TASK-24 P-TASK-15
def test_a_job_that_ran_across_a_restart_gives_its_tasks_results_when_it_ends(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    before = _harness(storage_database, harnesses, ArithmeticTasks(tasks_per_generation=1))
    before.settle()
    running = before.build()
    before.close()
    after = _harness(storage_database, harnesses, ArithmeticTasks(tasks_per_generation=1))
    # The component lost the job in the crash: it reports it failed.
    after.end(running, error="the component lost the job")
    after.settle()
    ((_, (result,)),) = after.generator.recorded
    assert isinstance(result, FailedTask)
    assert result.infrastructure_failure


# rule: P-TASK-24 P-PIPE-13
def test_a_restart_just_after_a_jobs_end_gives_its_results_from_the_replayed_outcome(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    before = _harness(storage_database, harnesses, ArithmeticTasks(tasks_per_generation=1))
    before.settle()
    data = before.build()
    outcome = JobOutcome(data.id, "c", "finished", {"rollout_rewards": {"add-g1-0": [1.0, 0.0]}})
    before.pipeline.samples.record_job_outcome("c", attrs.asdict(outcome))
    before.close()  # died before the stage saw the end
    after = _harness(storage_database, harnesses, ArithmeticTasks(tasks_per_generation=1))
    after.settle()
    ((_, (result,)),) = after.generator.recorded
    assert result == RolledOutTask(result.task, (1.0, 0.0))


# rule: P-TASK-24 P-TASK-20
def test_a_replayed_session_that_a_generation_used_makes_no_new_generation(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    records = _one_session()
    before = _harness(storage_database, harnesses, ArithmeticTasks(), **ONE_SESSION_A_ROUND)
    before.pipeline.push_many(records)
    before.settle()
    before.close()  # its release of r1 was never committed: the records come again
    after = _harness(storage_database, harnesses, ArithmeticTasks(), **ONE_SESSION_A_ROUND)
    after.pipeline.push_many(records)
    assert after.stage.status()["ended_records"] == {"replayed_session": 2}
    after.settle()
    assert after.generator.generate_calls == []  # generation 1's tasks still wait


# rule: P-TASK-24
def test_a_restart_reads_the_tasks_that_wait_not_the_history(
    storage_database: Database, harnesses: list[Harness], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart offers again the train tasks still waiting for a result: it reads those from
    the task store, not every task of every generation that already has its results."""
    before = _harness(storage_database, harnesses, ArithmeticTasks(tasks_per_generation=2))
    for _ in range(3):
        before.settle()
        before.train_all()
    before.settle()  # generation 4 made
    before.end(before.build())  # add-g4-0 gets its result, add-g4-1 waits
    before.close()
    read: list[str] = []
    get = TaskStore.get

    def recording_get(store: TaskStore, key: str) -> Any:
        read.append(key)
        return get(store, key)

    monkeypatch.setattr(TaskStore, "get", recording_get)
    after = _harness(storage_database, harnesses, ArithmeticTasks(tasks_per_generation=2))
    assert [key for key in read if key.startswith("task:")] == ["task:add-g4-1"]
    assert after.buffer_names() == ["add-g4-1"]
    after.settle()
    after.train_all()
    after.settle()
    assert [g for g, _ in after.generator.recorded] == [4]


def test_a_step_costs_what_is_in_progress_not_the_history(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    """Once generations pile up, the trainer's steps, reports, job ends and status read the
    ledger's indexes: none of them walks every generation or every published task."""
    harness = _harness(
        storage_database, harnesses, ArithmeticTasks(tasks_per_generation=1), **ONE_SESSION_A_ROUND
    )
    for _ in range(3):
        harness.settle()
        harness.train_all()
    scans: list[str] = []

    class Watched(dict[Any, Any]):
        def __iter__(self) -> Iterator[Any]:
            scans.append("iter")
            return super().__iter__()

        def keys(self) -> Any:
            scans.append("keys")
            return super().keys()

        def values(self) -> Any:
            scans.append("values")
            return super().values()

        def items(self) -> Any:
            scans.append("items")
            return super().items()

    ledger = harness.stage.ledger
    ledger.generations = Watched(ledger.generations)
    ledger.published = Watched(ledger.published)
    for record in _one_session():
        harness.pipeline.push(record)
    for _ in range(2):
        harness.settle()
        harness.train_all()
        harness.pipeline.status()
    assert [r.generation for r in harness.generator.generate_calls] == [1, 2, 3, 4, 5]
    assert ledger.generations[4].sessions == ("r1",)
    assert harness.stage.worker.wait(10)  # generation 5's results go out
    assert [generation for generation, _ in harness.generator.recorded] == [1, 2, 3, 4, 5]
    assert scans == []


# -- status ----------------------------------------------------------------------------------


# rule: P-TASK-25
def test_status_shows_the_generator_generations_task_counts_and_waiting_tasks(
    storage_database: Database, harnesses: list[Harness]
) -> None:
    harness = _harness(
        storage_database, harnesses, WordTasks(tasks_per_generation=2), buffer_size=4
    )
    harness.pipeline.produce()
    status = harness.pipeline.status()
    assert status["task_generation"]["generator"] == "WordTasks"
    assert status["task_generation"]["generation_in_flight"] == 1
    harness.settle()
    status = harness.pipeline.status()
    assert status["task_generation"] == {
        "generator": "WordTasks",
        "generation_in_flight": None,
        "completed_generations": 1,
        "rounds": 1,
        "source_sessions_waiting": 0,
        "last_error": None,
    }
    assert status["task_store"]["train_tasks"] == 2
    assert status["task_store"]["waiting_tasks"] == 2
    assert status["ready_samples"] == 2
