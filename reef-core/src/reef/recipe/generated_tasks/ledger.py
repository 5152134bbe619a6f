"""What the generated-task stage keeps in its task store, and the generation job (P-TASK-9..11,
P-TASK-23).

:class:`TaskLedger` is the stage's task store (``generated-tasks``) read and written through
typed methods. Every fact that must survive a restart is one key, written before the next step
depends on it, so a process that dies anywhere continues where the store says it stopped:

- ``generation:<n>``: the generation's request (its description and source records, kept whole
  so that a retry never depends on records being replayed), the source sessions it took, and
  whether its round ended once and whether it is complete;
- ``candidates:<n>``: the tasks ``generate`` returned, saved before any is validated;
- ``decision:<n>:<i>``: what became of candidate ``i``: published (with its split) or rejected;
- ``task:<name>``, ``digest:<sha256>``, ``split:<record id>``: the published tasks, their
  contents (duplicates are rejected) and the split each source record joined;
- ``result:<name>``: a train task's first rollout result;
- ``job:<data id>``: the train tasks a task job holds, until its end gave them results;
- ``deliverable:<n>`` (in the order generations got their last result) and ``delivered:<n>``.

:func:`run_generation` is one generation's work on the stage's worker: generate (unless the
candidates are saved), save, validate each undecided candidate, publish or reject it. It runs
no rollout (P-TASK-9).
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from reef.core.harbor import HarborTask
from reef.core.records import from_json, to_json
from reef.core.task_stores import KeyValueStore
from reef.errors import ReefError
from reef.recipe.generated_tasks import (
    FailedTask,
    GeneratedTaskResult,
    HeldOutTask,
    RejectedTask,
    TaskGenerator,
    result_from_json,
    result_to_json,
)
from reef.record2sample.generator import TaskGenerationRequest

__all__ = [
    "Generation",
    "GenerationFailed",
    "GenerationOutcome",
    "GenerationPlan",
    "TaskLedger",
    "run_generation",
    "saved_task",
]

Split = Literal["train", "eval"]

#: The reason a task is rejected when a published task has the same files (P-TASK-11).
DUPLICATE: Final = "duplicate of published task {name!r}"


class GenerationFailed(ReefError):
    """A generation ran out of attempts or time; the next round finishes it (P-TASK-10)."""


@attrs.frozen
class Generation:
    """One generation as the ledger keeps it.

    :ivar number: the generation's number (the request's ``generation``).
    :ivar request: what the generator is asked, kept whole for retries.
    :ivar sessions: the source sessions (their reports' ids) the generation took.
    :ivar round_ended: a round of it ended (finished or out of attempts): it counts toward
        ``rounds`` (P-TASK-22).
    :ivar complete: every candidate is published or rejected.
    :ivar train: the names of its train tasks, once complete.
    """

    number: int
    request: TaskGenerationRequest
    sessions: tuple[str, ...] = ()
    round_ended: bool = False
    complete: bool = False
    train: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "description": self.request.description,
            "source_records": [to_json(r) for r in self.request.source_records],
            "sessions": list(self.sessions),
            "round_ended": self.round_ended,
            "complete": self.complete,
            "train": list(self.train),
        }

    @classmethod
    def from_json(cls, number: int, value: Mapping[str, Any]) -> Generation:
        request = TaskGenerationRequest(
            number,
            str(value.get("description", "")),
            tuple(from_json(r) for r in value.get("source_records", [])),
        )
        return cls(
            number,
            request,
            tuple(value.get("sessions", [])),
            bool(value.get("round_ended")),
            bool(value.get("complete")),
            tuple(value.get("train", [])),
        )


class TaskLedger:
    """The generated-task stage's task store, typed (see the module's documentation).

    Reads go to memory filled from the store once (:meth:`load`); every write goes to the store
    first. The trainer's thread and the stage's worker both write, never the same key: the
    worker writes a running generation's keys, the trainer's thread results, jobs and
    deliveries.

    What the stage asks at every step and status (the oldest unfinished generation, the train
    tasks that wait for a result, the generations to send) is kept as each write lands, so
    its cost follows what is in progress, never the run's whole history.

    :param store: the stage's key/value store.
    """

    def __init__(self, store: KeyValueStore) -> None:
        self.store = store
        self.generations: dict[int, Generation] = {}
        self.published: dict[str, tuple[int, Split]] = {}
        self.results: dict[str, GeneratedTaskResult] = {}
        self.jobs: dict[str, tuple[str, ...]] = {}
        self.delivered: set[int] = set()
        self.rejected = 0
        self.candidates = 0
        # The indexes, written by both threads: the lock guards them.
        self._lock = threading.Lock()
        self._highest = 0
        self._open: set[int] = set()  # generations not complete
        self._rounds_ended: set[int] = set()
        self._sessions: set[str] = set()
        self._waiting: dict[str, int] = {}  # train task without a result -> its generation
        self._unmarked: dict[int, None] = {}  # complete, not yet deliverable, in that order
        self._deliverable: set[int] = set()
        self._undelivered: dict[int, None] = {}  # deliverable, not delivered, in that order
        self._splits: Counter[str] = Counter()

    def load(self) -> None:
        """Read the whole store into memory (a restart: P-TASK-24)."""
        deliverable: list[int] = []
        for key, value in self.store.items():
            kind, _, rest = key.partition(":")
            if kind == "generation":
                self.generations[int(rest)] = Generation.from_json(int(rest), value)
            elif kind == "candidates":
                self.candidates += len(value)
            elif kind == "decision" and "rejected" in value:
                self.rejected += 1
            elif kind == "task":
                self.published[rest] = (int(value["generation"]), value["split"])
            elif kind == "result":
                self.results[rest] = result_from_json(value)
            elif kind == "job":
                self.jobs[rest] = tuple(value)
            elif kind == "deliverable":
                deliverable.append(int(rest))
            elif kind == "delivered":
                self.delivered.add(int(rest))
        with self._lock:
            for generation in self.generations.values():
                self._index(None, generation)
            self._splits.update(split for _, split in self.published.values())
            for number in deliverable:
                self._add_deliverable(number)

    def _index(self, previous: Generation | None, generation: Generation) -> None:
        # With the lock held: a generation saved, or read by load (with every result read).
        number = generation.number
        self._highest = max(self._highest, number)
        self._sessions.update(generation.sessions)
        if generation.round_ended:
            self._rounds_ended.add(number)
        if not generation.complete:
            self._open.add(number)
        elif previous is None or not previous.complete:
            self._open.discard(number)
            for name in generation.train:
                if name not in self.results:
                    self._waiting[name] = number
            self._unmarked[number] = None

    def _add_deliverable(self, number: int) -> None:
        # With the lock held.
        self._deliverable.add(number)
        self._unmarked.pop(number, None)
        if number not in self.delivered:
            self._undelivered[number] = None

    # -- generations -----------------------------------------------------------------------

    def next_number(self) -> int:
        """The number of the next new generation: one more than any kept (P-TASK-24)."""
        with self._lock:
            return self._highest + 1

    def unfinished(self) -> Generation | None:
        """The oldest generation that is not complete: the next round finishes it."""
        with self._lock:
            number = min(self._open, default=None)
        return None if number is None else self.generations[number]

    def save_generation(self, generation: Generation) -> None:
        self.store.put(f"generation:{generation.number}", generation.to_json())
        with self._lock:
            self._index(self.generations.get(generation.number), generation)
            self.generations[generation.number] = generation

    def rounds_done(self) -> int:
        """The generations whose round ended at least once (P-TASK-22)."""
        with self._lock:
            return len(self._rounds_ended)

    def complete_count(self) -> int:
        """How many generations are complete."""
        with self._lock:
            return len(self.generations) - len(self._open)

    def session_used(self, report_id: str) -> bool:
        """Whether a kept generation took the source session of report ``report_id``."""
        with self._lock:
            return report_id in self._sessions

    def publish(self, name: str, number: int, split: Split) -> None:
        """Note task ``name`` of generation ``number`` as published (its key is written)."""
        with self._lock:
            before = self.published.get(name)
            if before is not None:
                self._splits[before[1]] -= 1
            self.published[name] = (number, split)
            self._splits[split] += 1

    def published_count(self, split: Split) -> int:
        """How many tasks are published in ``split``."""
        with self._lock:
            return self._splits[split]

    # -- results, jobs, deliveries (the trainer's thread) ----------------------------------

    def save_result(self, name: str, result: GeneratedTaskResult) -> bool:
        """Keep a train task's first result; True when it is new (P-TASK-15)."""
        stored = self.store.put_new(f"result:{name}", result_to_json(result))
        with self._lock:
            self.results.setdefault(name, result)
            self._waiting.pop(name, None)
        return stored

    def waiting_tasks(self) -> dict[int, tuple[HarborTask, ...]]:
        """The train tasks of every complete generation that have no result yet, read from the
        store, by generation in number order, each generation's in candidate order. Only the
        waiting tasks are read, so a restart's cost follows what is in progress."""
        with self._lock:
            waiting = dict(self._waiting)  # train task -> its generation
        tasks: dict[int, tuple[HarborTask, ...]] = {}
        for number in sorted(set(waiting.values())):
            names = (n for n in self.generations[number].train if n in waiting)
            found = (saved_task(self.store, name) for name in names)
            tasks[number] = tuple(task for task in found if task is not None)
        return tasks

    def tasks_without_result(self) -> tuple[str, ...]:
        """The train tasks of every complete generation that have no result yet."""
        with self._lock:
            return tuple(self._waiting)

    def every_result_in(self) -> tuple[int, ...]:
        """The complete generations whose train tasks all have a result and that are not yet
        deliverable, in the order they completed."""
        with self._lock:
            unmarked = tuple(self._unmarked)
            waiting = set(self._waiting.values())
        return tuple(number for number in unmarked if number not in waiting)

    def save_job(self, data_id: str, names: Sequence[str]) -> None:
        """Keep the train tasks a job holds until its end (a job that runs across a restart
        still finds them, P-TASK-16); a task leaves any older job it was in (that job was
        released)."""
        for other, held in list(self.jobs.items()):
            left = tuple(n for n in held if n not in names)
            if other != data_id and left != held:
                self._set_job(other, left)
        self._set_job(data_id, tuple(names))

    def _set_job(self, data_id: str, names: tuple[str, ...]) -> None:
        if names:
            self.store.put(f"job:{data_id}", list(names))
            self.jobs[data_id] = names
        else:
            self.store.delete(f"job:{data_id}")
            self.jobs.pop(data_id, None)

    def forget_job(self, data_id: str) -> None:
        self._set_job(data_id, ())

    def mark_deliverable(self, number: int) -> None:
        """Every train task of ``number`` has a result: it goes out in this order (P-TASK-17)."""
        with self._lock:
            if number in self._deliverable:
                return
        self.store.put_new(f"deliverable:{number}", True)
        with self._lock:
            self._add_deliverable(number)

    def undelivered(self) -> list[int]:
        """Generations whose results wait to go out, in the order they got their last one."""
        with self._lock:
            return list(self._undelivered)

    def mark_delivered(self, number: int) -> None:
        self.store.put(f"delivered:{number}", True)
        with self._lock:
            self.delivered.add(number)
            self._undelivered.pop(number, None)

    def generation_results(self, number: int) -> tuple[GeneratedTaskResult, ...]:
        """Every candidate's result of generation ``number``, in candidate order."""
        candidates = self.store.get(f"candidates:{number}") or []
        results: list[GeneratedTaskResult] = []
        for index, value in enumerate(candidates):
            task = HarborTask.from_json(value)
            decision = self.store.get(f"decision:{number}:{index}") or {}
            if "rejected" in decision:
                results.append(RejectedTask(task, str(decision["rejected"])))
            elif decision.get("published") == "eval":
                results.append(HeldOutTask(task))
            else:
                found = self.results.get(task.name)
                results.append(
                    found
                    if found is not None
                    else FailedTask(task, "the task has no result", infrastructure_failure=True)
                )
        return tuple(results)


def saved_task(store: KeyValueStore, name: str) -> HarborTask | None:
    """The published task ``name`` of a generated-task store, or ``None``: where the generator
    service reads a task it must stage again (the task store is each task's source, P-TASK-26).

    :param store: the scenario's ``generated-tasks`` store (``<component>:generated-tasks`` in a
        scenario of several trainers).
    """
    value = store.get(f"task:{name}")
    return None if value is None else HarborTask.from_json(value["task"])


# -- the generation job (the stage's worker) -------------------------------------------------


@attrs.frozen
class GenerationOutcome:
    """What a generation job returns to the stage: the generation, now complete."""

    generation: Generation
    train: tuple[HarborTask, ...]


@attrs.frozen
class GenerationPlan:
    """How a generation job runs: its generator, its limits and the split rule."""

    generator: TaskGenerator
    attempts: int
    deadline_seconds: float
    eval_fraction: float


def _split_of_key(key: str, eval_fraction: float) -> Split:
    # A fixed hash of the task's first source (or its name): the same sources always land in
    # the same split, in every process.
    value = int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) / 0x1_0000_0000
    return "eval" if value < eval_fraction else "train"


async def run_generation(
    ledger: TaskLedger, generation: Generation, plan: GenerationPlan
) -> GenerationOutcome:
    """Finish ``generation``: generate and save its candidates (unless saved), then validate
    and decide each undecided one, retrying a failure to run from the saved candidates up to
    ``plan.attempts`` times within ``plan.deadline_seconds`` (P-TASK-9, P-TASK-10).

    :raises GenerationFailed: when the attempts or the time ran out; the round ends without a
        task and the next one finishes this generation.
    """
    deadline = time.monotonic() + plan.deadline_seconds
    errors: list[str] = []
    for attempt in range(1, plan.attempts + 1):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            return await asyncio.wait_for(_attempt(ledger, generation, plan), left)
        except TimeoutError:
            errors.append(f"attempt {attempt}: ran past generation_deadline_seconds")
            break
        except Exception as exc:  # the generator or its checks could not run: retry
            errors.append(f"attempt {attempt}: {type(exc).__name__}: {exc}")
    raise GenerationFailed(
        f"generation {generation.number} did not finish: {'; '.join(errors) or 'no time left'}"
    )


async def _attempt(
    ledger: TaskLedger, generation: Generation, plan: GenerationPlan
) -> GenerationOutcome:
    store = ledger.store
    number = generation.number
    saved = store.get(f"candidates:{number}")
    if saved is None:
        made = await plan.generator.generate(generation.request)
        if not isinstance(made, tuple) or not all(isinstance(t, HarborTask) for t in made):
            raise TypeError(
                f"{type(plan.generator).__name__}.generate must return a tuple of HarborTask"
            )
        # Saved before any check: a retry validates these, never generates again (P-TASK-23).
        store.put(f"candidates:{number}", [task.to_json() for task in made])
        ledger.candidates += len(made)
        candidates: Sequence[HarborTask] = made
    else:
        candidates = [HarborTask.from_json(value) for value in saved]
    train: list[HarborTask] = []
    for index, task in enumerate(candidates):
        key = f"decision:{number}:{index}"
        decision = store.get(key)
        if decision is None:
            decision = await _decide(ledger, generation, index, task, plan)
            store.put(key, decision)
            if "rejected" in decision:
                ledger.rejected += 1
        if decision.get("published") == "train":
            train.append(task)
    complete = attrs.evolve(
        generation, round_ended=True, complete=True, train=tuple(t.name for t in train)
    )
    ledger.save_generation(complete)
    return GenerationOutcome(complete, tuple(train))


async def _decide(
    ledger: TaskLedger, generation: Generation, index: int, task: HarborTask, plan: GenerationPlan
) -> dict[str, Any]:
    """Validate ``task`` (candidate ``index``) and publish it with its split, or say why it is
    rejected.

    A retry after a failed write decides again from what the failed attempt wrote: a task it
    published stays published, and the digest it kept for a task it could not publish is no
    duplicate.
    """
    store = ledger.store
    published = store.get(f"task:{task.name}")
    if published is not None and (published.get("generation"), published.get("candidate")) == (
        generation.number,
        index,
    ):
        return {"published": published["split"]}
    missing = sorted(set(generation.request.source_record_ids) - set(task.source_agent_record_ids))
    if missing:
        # P-TASK-3: a task keeps its request's sources, or its split could not follow them.
        return {"rejected": f"the task does not keep its source records {missing}"}
    verdict = await plan.generator.validate(task)
    if not verdict.passed:
        return {"rejected": "validation failed: " + "; ".join(verdict.errors)}
    if task.name in ledger.published:
        return {"rejected": f"a published task is named {task.name!r}"}
    digest = task.digest()
    twin = store.get(f"digest:{digest}")
    if twin is not None and (twin != task.name or published is not None):
        return {"rejected": DUPLICATE.format(name=twin)}
    sources = task.source_agent_record_ids
    joined = {store.get(f"split:{source}") for source in sources} - {None}
    if len(joined) > 1:
        # P-TASK-23: its sources already belong to tasks of both splits.
        return {"rejected": "its source records joined tasks of both splits"}
    split: Split
    if joined:
        split = "eval" if joined == {"eval"} else "train"  # the split its sources joined
    else:
        split = _split_of_key(sources[0] if sources else task.name, plan.eval_fraction)
    for source in sources:
        store.put_new(f"split:{source}", split)
    store.put_new(f"digest:{digest}", task.name)
    store.put(
        f"task:{task.name}",
        {
            "generation": generation.number,
            "candidate": index,
            "split": split,
            "task": task.to_json(),
        },
    )
    ledger.publish(task.name, generation.number, split)
    return {"published": split}
