"""The generated-task recipe's stages: :class:`GeneratedTaskSamples` (record to sample,
P-TASK-8..25) and :class:`GeneratedTaskJobData` (sample to job, P-TASK-13).

A task job's data is the buffer's train tasks, as :class:`~reef.core.job_data.TaskSample`
values: Reef runs no rollout of them. The training component rolls each task out on its own
sampler at the job's start weights, as the job parameters' ``rollout`` says, trains on the
rollouts, and reports each task's rewards in the job's metrics (``rollout_rewards``). The
job-data stage tells the record-to-sample stage which tasks each job holds, so that the job's
end (``job_ended``) gives each of them its result, also when the job runs across a restart.

The record-to-sample stage runs *rounds*. A round is not a record set and trains nothing: it
runs one generation of the scenario's :class:`~reef.recipe.generated_tasks.TaskGenerator` on
the stage's own :class:`~reef.record2sample.worker.BackgroundJobWorker`, outside the trainer's
lock, one at a time (:func:`~reef.recipe.generated_tasks.ledger.run_generation`). The trainer's
thread only decides when a round is due, holds the source sessions, and takes in what ended, at
each ``advance``.

- **When.** The first round starts at the first ``advance`` (the pipeline's first look for job
  data). The next starts once ``jobs_per_round`` task jobs ended since the last round started,
  and only while fewer than ``refill_tasks`` train tasks wait to train; a round that made no
  train task, a failed task job, and a state in which every train task has a result are
  followed at once. ``rounds`` limits the generations whose round ended; an unfinished
  generation is finished by the next round whatever the limit (P-TASK-21, P-TASK-22).
- **Sources.** With ``source_records_per_round`` above 0, a report without a training arm
  (no ``metadata.arm``) whose calls all carry the ``source_tag`` header is a source session,
  held in arrival order; a round takes at most that many. Every other record is released at
  once, unassembled: the stage trains on no report (P-TASK-19, P-TASK-20).
- **Tasks.** A complete generation's train tasks go to the pipeline (``made_samples``) as
  ``generated-tasks/<task name>``; a task job reports their rollout rewards, and ``job_ended``
  turns them into results (P-TASK-12, P-TASK-15). Once every train task of a generation has a
  result, its results go to ``record_results``, in the order generations completed, from the
  worker; a delivery that fails waits for the next job (P-TASK-17).
- **Restarts.** Everything lives in the task store (:class:`~reef.recipe.generated_tasks.ledger.
  TaskLedger`): a new stage continues with the next generation number, finishes an unfinished
  one from its saved request and candidates, offers its untrained tasks again, sends the
  results the generator did not receive, and releases a replayed session that a generation
  already took (P-TASK-24).
"""

from __future__ import annotations

import importlib
import itertools
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final, Self, cast

import attrs

from reef.core.config import config_option
from reef.core.harbor import HarborTask
from reef.core.job_data import JobData, JobOutcome, Sample, SampleKind, TaskSample
from reef.core.plugins import PluginConfigError, PluginSettings
from reef.core.records import InferenceRecord, Record, Report
from reef.core.task_stores import TaskStores
from reef.core.trajectory_index import TrajectoryIndex
from reef.errors import ReefError
from reef.pipeline_context import JobStageBuild, PipelineContext, StageBuild
from reef.recipe.generated_tasks import (
    FailedTask,
    GeneratedTaskResult,
    RolledOutTask,
    TaskGenerator,
)
from reef.recipe.generated_tasks.ledger import (
    Generation,
    GenerationOutcome,
    GenerationPlan,
    TaskLedger,
    run_generation,
    saved_task,
)
from reef.record2sample.generator import TaskGenerationRequest
from reef.record2sample.stage import Record2Sample
from reef.record2sample.worker import BackgroundJobWorker
from reef.sample2job.stage import Sample2Job, Sample2JobSettings

__all__ = [
    "GeneratedTaskJobData",
    "GeneratedTaskSamples",
    "GeneratedTaskSamplesSettings",
    "TaskStoreMissing",
    "saved_scenario_task",
    "task_store_name",
]

logger = logging.getLogger(__name__)

#: The task store the stage keeps its tasks in (``<component>:generated-tasks`` in a scenario
#: of several trainers).
STORE_NAME: Final = "generated-tasks"
#: The prefix of a generated task's sample name in the sample store (P-TASK-12).
SAMPLE_PREFIX: Final = "generated-tasks/"

#: Why the stage releases a record: each is counted, never silent.
NOT_SOURCE_SESSION = "not_source_session"
SOURCE_SESSION_USED = "source_session_used"
REPLAYED_SESSION = "replayed_session"
AFTER_LAST_ROUND = "after_last_round"


def task_store_name(context: PipelineContext) -> str:
    """The task store of the generated-task stage of ``context``'s trainer:
    ``generated-tasks``, or ``<trainer>:generated-tasks`` in a scenario of several trainers,
    so each trainer's stage keeps its own generations."""
    return f"{context.component}:{STORE_NAME}" if context.shares_scenario else STORE_NAME


def saved_scenario_task(
    storage: TaskStores, scenario: str, trainers: Sequence[str], name: str
) -> HarborTask | None:
    """The published task ``name`` of ``scenario``, from the task store of the first of its
    ``trainers`` whose stage saved one by that name; ``None`` when none did. Where the
    generator service reads a task it stages again (P-TASK-26): it serves the scenario, not
    one trainer, so it looks in every trainer's store."""
    for trainer in trainers:
        context = PipelineContext(scenario, trainer, trainers=tuple(trainers))
        found = saved_task(storage.open(task_store_name(context)), name)
        if found is not None:
            return found
    return None


class TaskStoreMissing(ReefError):
    """The stage was built without the scenario's task stores (no scenario session)."""


def _name_value(_: object, __: attrs.Attribute[Any], value: str | None) -> None:
    if value is None:
        return
    name, sep, tag = value.partition("=")
    if not sep or not name or not tag or name != name.lower():
        raise ValueError(
            f"source_tag must be name=value with a lower-case name (the x-reef-tag-<name>"
            f" header's), got {value!r}"
        )


@attrs.frozen
class GeneratedTaskSamplesSettings(PluginSettings):
    """The keys of ``pipeline.record2sample.config`` of the generated-task recipe."""

    generator: str = config_option(
        help="the TaskGenerator: a registered task generator name or module:Class"
    )
    generator_config: Mapping[str, Any] = config_option(
        factory=dict, help="the generator's own config (its from_config reads it)"
    )
    description: str = config_option("", help="what tasks to make, given to every generation")
    jobs_per_round: int = config_option(
        1, help="task jobs that end between two rounds", validator=attrs.validators.ge(1)
    )
    refill_tasks: int = config_option(
        4,
        help="a round starts only while fewer train tasks than this wait to train",
        validator=attrs.validators.ge(1),
    )
    rounds: int | None = config_option(
        None,
        help="the most generations to run (unset: no limit)",
        validator=attrs.validators.optional(attrs.validators.ge(1)),
    )
    generation_attempts: int = config_option(
        3,
        help="how many times one round runs a generation that fails to run",
        validator=attrs.validators.ge(1),
    )
    generation_deadline_seconds: float = config_option(
        600.0, help="the time one round's attempts may take", validator=attrs.validators.gt(0)
    )
    source_records_per_round: int = config_option(
        0,
        help="the most source sessions one round takes (0: rounds use no recorded session)",
        validator=attrs.validators.ge(0),
    )
    source_tag: str | None = config_option(
        None,
        help="name=value: calls with header x-reef-tag-<name>: <value> make source sessions",
        validator=_name_value,
    )
    eval_fraction: float = config_option(
        0.0,
        help="the share of tasks (by their sources) published in the eval split",
        validator=[attrs.validators.ge(0.0), attrs.validators.lt(1.0)],
    )

    def __attrs_post_init__(self) -> None:
        if self.source_records_per_round > 0 and self.source_tag is None:
            raise ValueError(
                "source_records_per_round above 0 needs source_tag (name=value): it says which"
                " recorded sessions are sources"
            )


@attrs.frozen
class _Session:
    """A source session: its report and its calls, in store order."""

    report: Report
    calls: tuple[InferenceRecord, ...]

    @property
    def records(self) -> tuple[Record, ...]:
        """The calls, then the report: a request's ``source_records`` (P-TASK-20)."""
        return (*self.calls, self.report)


def resolve_generator(name: str, context: PipelineContext) -> type[TaskGenerator]:
    """The generator class a deployment names (registered name, or ``module:Class``).

    :raises PluginConfigError: at ``$.generator``, naming what is wrong.
    """
    try:
        if context.resolve_plugin is not None:
            found: Any = context.resolve_plugin("task_generator", name)
        else:
            module, sep, qualname = name.partition(":")
            if not sep:
                raise LookupError(f"write {name!r} as module:Class: no plugins to resolve it")
            found = importlib.import_module(module)
            for part in qualname.split("."):
                found = getattr(found, part)
    except (LookupError, ImportError, AttributeError) as exc:
        raise PluginConfigError("GeneratedTaskSamples", "$.generator", str(exc)) from exc
    if not (isinstance(found, type) and issubclass(found, TaskGenerator)):
        raise PluginConfigError(
            "GeneratedTaskSamples",
            "$.generator",
            f"{name!r} is not a TaskGenerator (reef.recipe.generated_tasks.TaskGenerator)",
        )
    return found


class GeneratedTaskSamples(Record2Sample[GeneratedTaskSamplesSettings]):
    """The generated-task recipe's record-to-sample stage; see the module's documentation.

    :param context: the pipeline's context. Without the scenario's task stores the stage is
        built (its config checked) but cannot run: :attr:`ledger` raises
        :class:`TaskStoreMissing`.
    :param generator: the scenario's task generator.
    :param generator_name: how the deployment named it (shown in status).

    The other keywords are :class:`GeneratedTaskSamplesSettings`' keys.
    """

    Settings: ClassVar[type[PluginSettings]] = GeneratedTaskSamplesSettings

    def __init__(
        self,
        context: PipelineContext,
        generator: TaskGenerator,
        *,
        generator_name: str = "",
        description: str = "",
        jobs_per_round: int = 1,
        refill_tasks: int = 4,
        rounds: int | None = None,
        generation_attempts: int = 3,
        generation_deadline_seconds: float = 600.0,
        source_records_per_round: int = 0,
        source_tag: str | None = None,
        eval_fraction: float = 0.0,
    ) -> None:
        super().__init__(context)
        self._ledger: TaskLedger | None = None
        if context.task_storage is not None:
            self._ledger = TaskLedger(context.task_storage.open(task_store_name(context)))
            self._ledger.load()
        self.generator = generator
        self.generator_name = generator_name or type(generator).__name__
        self.description = description
        self.jobs_per_round = jobs_per_round
        self.refill_tasks = refill_tasks
        self.rounds = rounds
        self.plan = GenerationPlan(
            generator, generation_attempts, generation_deadline_seconds, eval_fraction
        )
        self.source_records_per_round = source_records_per_round
        tag_name, _, tag_value = (source_tag or "").partition("=")
        # Without sessions to take, every record is released at once.
        self._tag = (tag_name, tag_value) if source_tag and source_records_per_round else None
        self.worker = BackgroundJobWorker(f"reef-generated-tasks-{context.scenario}")
        self.last_error: str | None = None
        self._index = TrajectoryIndex()
        self._sessions: deque[_Session] = deque()
        self._round_sessions: dict[int, tuple[_Session, ...]] = {}
        self._in_flight: int | None = None
        self._started = False
        self._jobs_since_round = 0
        self._follow_now = False
        self._made: list[tuple[str, TaskSample]] = []
        self._unsaved: dict[str, GeneratedTaskResult] = {}
        self._deliveries = itertools.count()
        self._delivering = False
        if self._ledger is not None:
            self._recover()

    @property
    def ledger(self) -> TaskLedger:
        """The stage's task store.

        :raises TaskStoreMissing: when the stage was built without task stores (to check a
            deployment, or for admission), which can check its config but not run rounds.
        """
        if self._ledger is None:
            raise TaskStoreMissing(
                f"scenario {self.context.scenario!r}: GeneratedTaskSamples keeps its tasks in"
                " the scenario's task stores, and this pipeline has none (build it with"
                " reef.train.stages.build_pipeline, or give the context task_storage)"
            )
        return self._ledger

    @classmethod
    def from_settings(cls, settings: GeneratedTaskSamplesSettings, build: StageBuild) -> Self:
        """Build the generator once for the scenario (P-TASK-2), then the stage."""
        context = build.context
        generator_class = resolve_generator(settings.generator, context)
        try:
            generator = generator_class.from_config(
                settings.generator_config, scenario=context.scenario, environ=build.environ
            )
        except PluginConfigError as exc:  # its keys are generator_config's
            raise PluginConfigError.of(
                [
                    PluginConfigError(e.plugin, f"$.generator_config{e.key[1:]}", e.reason)
                    for e in exc.errors
                ]
            ) from exc
        keywords = settings.as_keywords()
        del keywords["generator"], keywords["generator_config"]
        return cls(context, generator, generator_name=settings.generator, **keywords)

    def _recover(self) -> None:
        """Take up what the store says (P-TASK-24): offer every complete generation's train
        tasks without a result again (the sample store ignores those it holds), and queue for
        delivery a generation whose results completed before a crash could say so. Beyond
        the ledger's one read of the store, it reads only the tasks still waiting."""
        for number, tasks in self.ledger.waiting_tasks().items():
            self._offer(number, tasks)
        for number in sorted(self.ledger.every_result_in()):
            self.ledger.mark_deliverable(number)

    # -- records in: source sessions -------------------------------------------------------

    def push(self, record: Record) -> None:
        """Hold a source session's records; release every other record at once, unassembled."""
        if self._tag is None:
            self.end((record,), NOT_SOURCE_SESSION)
        elif isinstance(record, InferenceRecord):
            if record.id not in self._index:
                self._index.add(record)
            if record.tags.get(self._tag[0]) == self._tag[1]:
                self.hold(record)
            else:
                self.end((record,), NOT_SOURCE_SESSION)
        elif isinstance(record, Report):
            self._take_report(record)
        else:
            self.end((record,), NOT_SOURCE_SESSION)

    def replay_consumed(self, record: Record) -> None:
        """Index a released call, so that a later report on its trajectory finds it."""
        if isinstance(record, InferenceRecord) and record.id not in self._index:
            self._index.add(record)
        super().replay_consumed(record)

    def _take_report(self, report: Report) -> None:
        calls, whole = self._calls_of(report)
        if not whole or "arm" in report.metadata:
            self._release(report, calls, NOT_SOURCE_SESSION)
        elif self.ledger.session_used(report.id):
            # A session a generation took, pushed again after a restart: the generation keeps
            # its records, so this makes nothing (P-TASK-24).
            self._release(report, calls, REPLAYED_SESSION)
        elif self._limit_reached():
            self._release(report, calls, AFTER_LAST_ROUND)
        else:
            self._sessions.append(_Session(report, calls))

    def _calls_of(self, report: Report) -> tuple[tuple[InferenceRecord, ...], bool]:
        """The held calls of the report's trajectories, in store order, and whether they are
        all of its calls (every call known, tagged, and not taken)."""
        known = [ref for ref in report.references if ref in self._index]
        ids = dict.fromkeys(cid for ref in known for cid in self._index.trajectory(ref))
        calls = [self.held_record(cid) for cid in ids]
        held = tuple(c for c in calls if isinstance(c, InferenceRecord))
        return held, len(known) == len(report.references) and len(held) == len(calls)

    def _release(self, report: Report, calls: tuple[InferenceRecord, ...], reason: str) -> None:
        self.end((report,), reason)
        self.end([c for c in calls if self.held_record(c.id) is not None], reason)

    # -- rounds ----------------------------------------------------------------------------

    def _limit_reached(self) -> bool:
        return (
            self.rounds is not None
            and self.ledger.rounds_done() >= self.rounds
            and self.ledger.unfinished() is None
        )

    def waiting_tasks(self) -> int:
        """Train tasks that wait to train: published, with no result, in no task job."""
        in_jobs = {name for names in self.ledger.jobs.values() for name in names}
        return sum(1 for name in self.ledger.tasks_without_result() if name not in in_jobs)

    def _round_due(self) -> bool:
        if self._in_flight is not None:
            return False
        if self.ledger.unfinished() is not None:
            return True  # finish it: it holds sessions and may hold saved candidates
        if self._limit_reached() or self.waiting_tasks() >= self.refill_tasks:
            return False
        every_result = not self.ledger.tasks_without_result() and not self.ledger.jobs
        return (
            not self.ledger.generations
            or self._follow_now
            or every_result
            or self._jobs_since_round >= self.jobs_per_round
        )

    def advance(self, now: float) -> None:
        """Take in the worker's ended jobs; start the round that is due (P-TASK-8)."""
        del now
        for finished in self.worker.finished():
            kind, number = cast(tuple[str, int], finished.key)
            if kind == "generation":
                self._generation_ended(number, finished.result, finished.error)
            else:
                self._delivery_ended(finished.result, finished.error)
        if not self._started:
            self._started = True
            self._deliver()  # results a previous process did not send (P-TASK-24)
        if self._round_due():
            try:
                self._start_round()
            except Exception as exc:  # the store failed: the round is due again next time
                self._note_error("starting a round", exc)

    def _start_round(self) -> None:
        generation = self.ledger.unfinished()
        if generation is None:
            taken = tuple(
                self._sessions.popleft()
                for _ in range(min(self.source_records_per_round, len(self._sessions)))
            )
            number = self.ledger.next_number()
            request = TaskGenerationRequest(
                number, self.description, tuple(r for s in taken for r in s.records)
            )
            generation = Generation(number, request, tuple(s.report.id for s in taken))
            try:
                self.ledger.save_generation(generation)
            except Exception:
                self._sessions.extendleft(reversed(taken))
                raise
            self._round_sessions[number] = taken
        self._in_flight = generation.number
        self._jobs_since_round = 0
        self._follow_now = False
        ledger, plan, started = self.ledger, self.plan, generation
        self.worker.submit(
            ("generation", generation.number), lambda: run_generation(ledger, started, plan)
        )

    def _generation_ended(
        self, number: int, outcome: GenerationOutcome | None, error: BaseException | None
    ) -> None:
        self._in_flight = None
        if outcome is None:
            self._note_error(f"generation {number}", error)
            generation = self.ledger.generations[number]
            if not generation.round_ended:
                try:
                    self.ledger.save_generation(attrs.evolve(generation, round_ended=True))
                except Exception as exc:
                    self._note_error(f"generation {number}", exc)
            self._follow_now = True  # no task, so no job end will come from it
            return
        for session in self._round_sessions.pop(number, ()):
            self._release(session.report, session.calls, SOURCE_SESSION_USED)
        self._offer(number, outcome.train)
        if not outcome.train:
            self._follow_now = True
            self.ledger.mark_deliverable(number)
            self._deliver()

    def _offer(self, number: int, tasks: list[HarborTask] | tuple[HarborTask, ...]) -> None:
        for task in tasks:
            sample = TaskSample(task.name, task.to_json(), "train", metadata={"generation": number})
            self._made.append((f"{SAMPLE_PREFIX}{task.name}", sample))

    def made_samples(self) -> tuple[tuple[str, TaskSample], ...]:
        """The train tasks of generations that completed since the last call (P-TASK-12)."""
        made, self._made = tuple(self._made), []
        return made

    # -- task jobs and their results -------------------------------------------------------

    def task_job_built(self, data_id: str, names: tuple[str, ...]) -> None:
        """A task job's data holds these train tasks (``GeneratedTaskJobData`` says so): its
        end gives them their results, in this process or after a restart."""
        try:
            self.ledger.save_job(data_id, names)
        except Exception as exc:  # kept in memory: this process still gives the results
            self.ledger.jobs[data_id] = names
            self._note_error(f"keeping the tasks of job {data_id}", exc)

    def job_ended(self, outcome: JobOutcome) -> None:
        """Give each train task of the job that has no result its result (P-TASK-15), save
        the results a store failure left unsaved, and send complete generations' results."""
        names = self.ledger.jobs.get(outcome.job_id, ())
        rewards = outcome.metrics.get("rollout_rewards") or {}
        failures = outcome.metrics.get("rollout_failures") or {}
        for name in names:
            if name in self.ledger.results or name in self._unsaved:
                continue
            self._unsaved[name] = self._result(name, outcome, rewards, failures)
        if names:
            self._jobs_since_round += 1
            if outcome.event == "failed":
                self._follow_now = True  # its tasks have results; no other job end is due
        self._save_results()
        if names and not any(n in self._unsaved for n in names):
            try:
                self.ledger.forget_job(outcome.job_id)
            except Exception as exc:
                self._note_error(f"forgetting job {outcome.job_id}", exc)
        for number in self.ledger.every_result_in():
            try:
                self.ledger.mark_deliverable(number)
            except Exception as exc:
                self._note_error(f"generation {number}", exc)
        self._deliver()

    def _result(
        self, name: str, outcome: JobOutcome, rewards: Any, failures: Any
    ) -> GeneratedTaskResult:
        task = saved_task(self.ledger.store, name)
        assert task is not None, f"job {outcome.job_id}: task {name!r} was never published"
        ran = rewards.get(name) if isinstance(rewards, Mapping) else None
        if outcome.event == "finished" and isinstance(ran, list) and ran:
            return RolledOutTask(task, ran)
        failed = failures.get(name) if isinstance(failures, Mapping) else None
        if isinstance(failed, Mapping):
            return FailedTask(
                task, str(failed.get("error")), bool(failed.get("infrastructure_failure"))
            )
        why = outcome.error or "the job reported no rollout rewards for the task"
        return FailedTask(task, f"job {outcome.job_id}: {why}", infrastructure_failure=True)

    def _save_results(self) -> None:
        for name, result in list(self._unsaved.items()):
            try:
                self.ledger.save_result(name, result)
            except Exception as exc:  # saved again at the next job's end (P-TASK-16)
                self._note_error(f"saving the result of task {name}", exc)
                return
            del self._unsaved[name]

    def _deliver(self) -> None:
        """Send every complete generation's results not yet received, in the order they
        completed, on the worker; one that fails waits for the next job (P-TASK-17)."""
        pending = self.ledger.undelivered()
        if not pending or self._delivering:
            return
        try:
            batches = [(n, self.ledger.generation_results(n)) for n in pending]
        except Exception as exc:
            self._note_error("reading results to send", exc)
            return
        ledger, generator = self.ledger, self.generator

        async def deliver() -> list[str]:
            errors = []
            for number, results in batches:
                try:
                    await generator.record_results(results, generation=number)
                    ledger.mark_delivered(number)
                except Exception as exc:
                    errors.append(f"generation {number}: {type(exc).__name__}: {exc}")
            return errors

        self._delivering = True
        self.worker.submit(("delivery", next(self._deliveries)), deliver)

    def _delivery_ended(self, errors: list[str] | None, error: BaseException | None) -> None:
        self._delivering = False
        if error is not None:
            self._note_error("sending results", error)
        for message in errors or ():
            self.last_error = f"sending results: {message}"
            logger.warning("scenario %s: %s", self.context.scenario, self.last_error)
        if error is None and not errors:
            # Generations that completed while this delivery ran go out now: no later job
            # may come to send them. A failed delivery waits for the next job (P-TASK-17).
            self._deliver()

    # -- observation and shutdown ----------------------------------------------------------

    def _note_error(self, where: str, exc: BaseException | None) -> None:
        self.last_error = f"{where}: {type(exc).__name__}: {exc}"
        logger.warning("scenario %s: %s", self.context.scenario, self.last_error)

    def status(self) -> dict[str, Any]:
        """The base status, ``task_generation`` and ``task_store`` (P-TASK-25)."""
        return {
            **super().status(),
            "task_generation": {
                "generator": self.generator_name,
                "generation_in_flight": self._in_flight,
                "completed_generations": self.ledger.complete_count(),
                "rounds": self.ledger.rounds_done(),
                "source_sessions_waiting": len(self._sessions),
                "last_error": self.last_error,
            },
            "task_store": {
                "candidates": self.ledger.candidates,
                "rejected": self.ledger.rejected,
                "train_tasks": self.ledger.published_count("train"),
                "eval_tasks": self.ledger.published_count("eval"),
                "waiting_tasks": self.waiting_tasks(),
                "results": len(self.ledger.results),
                "unsaved_results": len(self._unsaved),
                "generations_delivered": len(self.ledger.delivered),
                "generations_to_deliver": len(self.ledger.undelivered()),
            },
        }

    def background_jobs_running(self) -> bool:
        """True while a generation or a delivery runs (P-SLOW-2)."""
        return self.worker.running()

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker: a running generation is cancelled and finished by a later round."""
        self.worker.close(timeout)


#: ``buffer_size`` when the config sets none: a job takes at most this many tasks (or
#: ``job_samples``, when larger).
DEFAULT_BUFFER_SIZE: Final = 4


class GeneratedTaskJobData(Sample2Job):
    """Task jobs of the buffer's train tasks: at least ``job_samples`` (1 by default), at most
    ``buffer_size`` (4 by default).

    :param record2sample: the recipe's record-to-sample stage, told each job's tasks; ``None``
        for tasks that no such stage made (imported tasks in a manual job).
    """

    default_job_samples: ClassVar[int | None] = 1
    #: In auto mode the buffer's tasks train: the recipe gives task jobs their parameters.
    job_parameter_kinds: ClassVar[frozenset[SampleKind]] = frozenset({"task"})

    def __init__(
        self,
        context: PipelineContext,
        *,
        job_samples: int = 1,
        buffer_size: int | None = None,
        record2sample: GeneratedTaskSamples | None = None,
    ) -> None:
        if buffer_size is None:
            buffer_size = max(DEFAULT_BUFFER_SIZE, job_samples)
        super().__init__(context, job_samples=job_samples, buffer_size=buffer_size)
        self.record2sample = record2sample

    @classmethod
    def from_settings(cls, settings: Sample2JobSettings, build: JobStageBuild) -> Self:
        """The job size keys, and the record-to-sample stage when it makes generated tasks."""
        record2sample = build.record2sample
        return cls(
            build.context,
            job_samples=cls.resolve_job_samples(settings),
            buffer_size=settings.buffer_size,
            record2sample=(
                record2sample if isinstance(record2sample, GeneratedTaskSamples) else None
            ),
        )

    def make_job_data(self, samples: Sequence[Sample], data_id: str) -> JobData:
        """The tasks, in buffer order; the record-to-sample stage learns which they are.

        :raises ValueError: for a sample that is not a task.
        """
        others = [s.sample_id for s in samples if not isinstance(s, TaskSample)]
        if others:
            raise ValueError(f"GeneratedTaskJobData trains tasks; {others} are not tasks")
        if self.record2sample is not None:
            names = tuple(s.name for s in samples if isinstance(s, TaskSample))
            self.record2sample.task_job_built(data_id, names)
        return JobData(data_id, tuple(samples))
