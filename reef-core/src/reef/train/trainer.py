"""The trainer loop: one scenario's trainer for one training component, on its own thread.

A :class:`Trainer` runs while its process holds the trainer's lease
(:class:`reef.storage.TrainerLeases`); a heartbeat thread renews it. Under the lease it builds
its pipeline and component on a :class:`reef.storage.FencedDatabase`, so nothing it writes
commits once another process took over. Each step, under the trainer's lock:

1. read the records stored since its cursor, in store order (gap-safe positions), and push them;
2. ``produce`` (background work of the stage);
3. apply the stored training mode and queue the unread training instructions (the HTTP service
   writes both to the store; manual-buffer edits are read from the store by the pipeline);
4. with no job running: give the pipeline the serving artifact, then ``reserve()`` job data
   (a :class:`~reef.train.reservation.JobReservation` of ``job_samples`` samples), validate it
   against the stage's ``output_schema``, the event hooks (``reef_job_data_built``;
   ``reef_before_submit``, which may replace the data and give part of the reservation back,
   ``JobData.given_back``), record the job as running and in the job history (each consumed
   sample with the reward it trains with and what the extensions say of it,
   ``reef_job_provenance``), submit it to the component and commit the reservation (every
   reserved sample but those given back is consumed; those return to the buffer), or release
   it when anything before the submission refused it;
5. with a job running: ``poll`` it; once it ended, commit its end durably in one step
   (``record_job_outcome``: the trainer's last outcome, the job history's end, a failed job's
   drop count and the running job cleared, all or none), then hand it to the pipeline
   (``job_ended``) and to the plugins (``reef_job_ended``), and publish the new weights as an
   artifact (served from the next reservation on);
6. write the trainer's status snapshot, with what the extensions report of the scenario
   (``reef_scenario_status``) under ``extensions``, and the samples it leaves out as stale
   when they changed (:class:`reef.storage.StaleSamples`).

Recovery (a start under a new lease): a trainer that finds no running job hands the last
job outcome to its fresh stage and to the plugins before anything else (P-PIPE-13); a crash
after a job's end and before its publication lands here, since the end and the clearing of the
running job are one transaction. One that finds a running job asks the component how it ended;
a submission that a crash left uncommitted is committed when the component trained it, and
released otherwise (and the last outcome is then replayed first, as with no running job). On SIGTERM
(:meth:`Trainer.stop`) the trainer waits for its running job to end and commits it; reserved,
unacknowledged data is released, and the lease is given up so another process takes over at
once.

Why this module is long: one trainer's step, recovery and status snapshot share the lease, the
lock and the running job; split across modules they would pass those back and forth. The
pipeline it drives (and its reservations, buffer) live in their own modules.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Protocol

import attrs

from reef.components.interface import JobHandle, PublicationWatch, TrainingComponent
from reef.core.job_data import JobData, JobOutcome, sample_reward
from reef.core.records import JSON
from reef.plugins import Plugins
from reef.storage import (
    ArtifactEvaluations,
    Database,
    FencedDatabase,
    JobHistory,
    Lease,
    LeaseLostError,
    Position,
    RecordStore,
    SampleOfJob,
    ScenarioSettings,
    TrainerLeases,
    TrainerState,
)
from reef.storage.scenario_settings import TRAINING_MODE_SETTING, snapshot_key
from reef.trackers import Tracker
from reef.trackers.runs import TrainerTrackers
from reef.train.pipeline import TrainingPipeline

__all__ = [
    "PartsFactory",
    "Trainer",
    "TrainerObserver",
    "TrainerParts",
    "TrainerSettings",
    "process_holder",
]

logger = logging.getLogger(__name__)

#: How many errors the status snapshot keeps.
_LAST_ERRORS: Final = 10
#: The job metrics a trainer sums over its tenure for status: samples whose replies trained
#: from their text, not the engine's tokens; whose prompt differed from the engine's; cut at
#: their token limit; trained at temperature 1 though sampled at another.
COUNTED_METRICS: Final = (
    "retokenized_samples",
    "prompt_mismatch_samples",
    "truncated_samples",
    "untempered_samples",
)
#: How many of the artifacts served last the status snapshot keeps (``served_artifacts``).
_SERVED_KEPT: Final = 64


def served_before(snapshot: Any) -> list[str]:
    """The artifacts a trainer's previous tenure served, oldest first, from its last status
    snapshot (``[]`` when it has none)."""
    if not isinstance(snapshot, Mapping):
        return []
    served = snapshot.get("served_artifacts")
    if isinstance(served, list):
        return [a for a in served if isinstance(a, str)]
    last = snapshot.get("served_artifact")
    return [last] if isinstance(last, str) else []


class TrainerObserver(Protocol):
    """What hears of each job's steps and end: the service's metrics and traces
    (``docs/observe.md``). Called on the trainer's thread; it must not raise."""

    def job_step(
        self, scenario: str, trainer: str, job_id: str, step: str, started: float, ended: float
    ) -> None:
        """One step of a job took from ``started`` to ``ended`` (``time.time()``): ``reserve``
        (its data taken from the buffer), ``submit`` (written down and given to the
        component), ``train`` (the component ran it), ``publish`` (its artifact published)."""

    def job_ended(self, scenario: str, trainer: str, outcome: JobOutcome) -> None:
        """The job ended, its end durable and its artifact published (after its last step)."""


def process_holder() -> str:
    """A lease holder name unique to this process: host, pid and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@attrs.frozen
class TrainerSettings:
    """How a trainer paces itself.

    :ivar poll_interval: seconds between steps when nothing happened (also how often a running
        job and background work are polled).
    :ivar lease_ttl: the longest a dead holder's trainer goes without a holder: another
        process takes the lease within this many seconds of the death (a claim lasts half of
        it; the heartbeat renews and standbys try every sixth: :class:`reef.storage.TrainerLeases`),
        then builds the trainer's parts.
    :ivar record_batch: the most records read from the store per step.
    """

    poll_interval: float = 0.2
    lease_ttl: float = 10.0
    record_batch: int = 500


@attrs.frozen
class TrainerParts:
    """What a trainer builds when it takes its lease: the pipeline (its stores on the fenced
    database) and the training component."""

    pipeline: TrainingPipeline
    component: TrainingComponent


#: Builds the parts on the fenced database of a new tenure.
PartsFactory = Callable[[Database], TrainerParts]


@attrs.frozen
class _RunningJob:
    """A job submitted and not ended: what recovery needs to finish its commit.

    ``sample_ids`` are the samples the commit consumes (the reservation less what the
    submission gave back), not only those submitted: a commit that recovery finishes consumes
    exactly what the acknowledgement would have.
    """

    job_id: str
    sample_ids: tuple[str, ...]
    instruction_id: str | None
    released_record_ids: tuple[str, ...]
    #: How many released records ended without training, by reason (the commit counts them).
    drops: Mapping[str, int] = attrs.field(factory=dict)

    def to_json(self) -> JSON:
        return {
            "job_id": self.job_id,
            "sample_ids": list(self.sample_ids),
            "instruction_id": self.instruction_id,
            "released_record_ids": list(self.released_record_ids),
            "drops": dict(self.drops),
        }

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> _RunningJob:
        return cls(
            str(body["job_id"]),
            tuple(body["sample_ids"]),
            body.get("instruction_id"),
            tuple(body.get("released_record_ids", ())),
            {str(reason): int(n) for reason, n in (body.get("drops") or {}).items()},
        )


class Trainer:
    """The trainer of one scenario and component (see the module's documentation).

    :param scenario: the scenario's name.
    :param name: the trainer's name (its component's name in the deployment).
    :param database: the scenario's database (unfenced: the trainer fences it per tenure).
    :param build: makes the pipeline and component on the fenced database of a tenure.
    :param plugins: the plugins whose event hooks run; ``None`` for none.
    :param job_parameters: the recipe's job parameters, given to the component with each job.
    :param holder: this process's lease holder name.
    :param settings: pacing and lease settings.
    :param trackers: the experiment trackers each job is logged to, by their names in the
        deployment (one run each, resumed by every tenure).
    """

    def __init__(
        self,
        scenario: str,
        name: str,
        *,
        database: Database,
        build: PartsFactory,
        plugins: Plugins | None = None,
        job_parameters: Mapping[str, Any] | None = None,
        holder: str | None = None,
        settings: TrainerSettings | None = None,
        trackers: Sequence[tuple[str, Tracker]] = (),
    ) -> None:
        self.scenario = scenario
        self.name = name
        self.settings = settings or TrainerSettings()
        self.holder = holder or process_holder()
        self._database = database
        self._build = build
        self._plugins = plugins
        self._job_parameters = dict(job_parameters or {})
        self._trackers = tuple(trackers)
        self._tracked: TrainerTrackers | None = None
        self._leases = TrainerLeases(database, scenario, ttl=self.settings.lease_ttl)
        #: Serialises every call of the pipeline: the trainer's steps and outside callers.
        self.lock = threading.RLock()
        self._stopping = threading.Event()
        self._wake = threading.Event()
        self._lost = threading.Event()
        self._thread: threading.Thread | None = None
        self._errors: list[JSON] = []
        self.lease: Lease | None = None
        self.parts: TrainerParts | None = None
        self.jobs_ended = 0
        #: What hears of each job's steps; set by the process that runs the trainer.
        self.observer: TrainerObserver | None = None
        #: When each running job reached its component (``time.time()``), by job id.
        self._training_since: dict[str, float] = {}
        #: The sums of :data:`COUNTED_METRICS` over the jobs that ended in this tenure, and
        #: ``jobs_while_publication_failed``: jobs started while the engine had not taken the
        #: newest artifact (their data a publication behind, or more).
        self.job_counts: dict[str, int] = {}
        #: Why no job starts now: the engine failed to take the last artifacts in a row.
        self.paused: str | None = None
        self._publication_failing = False
        #: The artifacts served, oldest first (the last tenure's, then this one's).
        self._served: list[str] = []

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Run the trainer on its own thread (it waits for the lease first)."""
        self._thread = threading.Thread(
            target=self.run, name=f"reef-trainer-{self.scenario}-{self.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the current step: a running job is waited for and committed, reserved
        data is released, the lease is given up.

        :raises TimeoutError: when the thread did not stop within ``timeout`` seconds.
        """
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(
                    f"trainer {self.name!r} of scenario {self.scenario!r} did not stop"
                    f" within {timeout} s"
                )

    def wake(self) -> None:
        """Take the next step now instead of at the next poll (something changed in the
        store: a mode, an instruction, the manual buffer)."""
        self._wake.set()

    def run(self) -> None:
        """The thread's body: take the lease, train under it, repeat after losing it."""
        while not self._stopping.is_set():
            lease = self._leases.try_acquire(self.name, self.holder)
            if lease is None:
                self._stopping.wait(self._leases.beat)
                continue
            self.lease = lease
            self._lost.clear()
            heartbeat = threading.Thread(
                target=self._heartbeat, name=f"reef-lease-{self.scenario}-{self.name}", daemon=True
            )
            heartbeat.start()
            try:
                self._tenure(lease)
            except LeaseLostError as exc:
                logger.warning("%s", exc)
                self._lost.set()
            except Exception as exc:  # a bug or a broken store: record it, retry the tenure
                logger.exception("trainer %s of scenario %s failed", self.name, self.scenario)
                self._note_error("tenure", exc)
                self._stopping.wait(self._leases.beat)
            finally:
                lost = self._lost.is_set()
                self._lost.set()  # ends the heartbeat
                heartbeat.join()
                if not lost:
                    self._leases.release(self.lease)
                self.lease = None

    def _heartbeat(self) -> None:
        while not self._lost.wait(self._leases.beat):
            lease = self.lease
            if lease is None:
                return
            try:
                self.lease = self._leases.renew(lease)
            except LeaseLostError as exc:
                logger.warning("%s; the trainer stops training here", exc)
                self._lost.set()
                return
            except Exception:  # the store is unreachable now: try again at the next beat
                logger.warning("could not renew the lease of %s", self.name, exc_info=True)

    # -- one tenure ------------------------------------------------------------------------

    def _tenure(self, lease: Lease) -> None:
        fenced = FencedDatabase(self._database, self._leases, lease)
        parts = self._build(fenced)
        self.parts = parts
        pipeline, component = parts.pipeline, parts.component
        records = RecordStore(self._database, self.scenario)
        state = TrainerState(fenced, self.scenario)
        settings = ScenarioSettings(fenced, self.scenario)
        history = JobHistory(fenced, self.scenario)
        tracked = TrainerTrackers(
            self._trackers,
            trainer=self.name,
            settings=settings,
            history=history,
            evaluations=ArtifactEvaluations(fenced, self.scenario),
            note_error=self._note_error,
        )
        self._tracked = tracked
        cursor: Position | None = None
        try:
            with self.lock:
                running = self._recover(pipeline, component, state)
                history.release_unfinished(
                    self.name, running=None if running is None else running.job_id
                )
                serving = component.publish().artifact_id
                # What the previous tenure served comes first (P-STALE-5): data made under
                # those artifacts keeps its age, and when this tenure serves the same weights
                # (the same content hash, the same artifact) nothing ages at all.
                self._served = served_before(settings.get(snapshot_key(self.name)))
                for artifact in self._served:
                    pipeline.observe_serving_artifact_id(artifact)
                self._note_served(serving)
                tracked.open()
                last = pipeline.last_job_outcome()
                if last is not None:  # logged already unless a crash came first
                    tracked.job_ended(last, serving)
            while not self._stopping.is_set() or running is not None:
                if self._lost.is_set():
                    raise LeaseLostError(lease, None, None)
                with self.lock:
                    cursor, pushed = self._read_records(records, cursor, pipeline)
                    pipeline.produce()
                    self._apply_settings(pipeline, settings)
                    if running is None and not self._stopping.is_set():
                        serving = self._publication_allows(component, serving)
                        if self.paused is None:
                            pipeline.observe_serving_artifact_id(serving)
                            running = self._submit_next(pipeline, component, state, history)
                            if running is not None and self._publication_failing:
                                self._count("jobs_while_publication_failed", 1)
                    busy = pushed or running is not None
                    if running is not None:
                        outcome = component.poll(JobHandle(running.job_id, component.name))
                        if outcome is not None:
                            serving = self._end_job(pipeline, component, outcome)
                            if outcome.event == "finished":  # the weights it made
                                history.published(self.name, outcome.job_id, serving)
                            self._note_served(serving)
                            tracked.job_ended(outcome, serving)
                            running = None
                    snapshot = self.snapshot(pipeline, running, serving)
                    settings.set(snapshot_key(self.name), snapshot)
                    pipeline.write_stale_marks()
                if not busy or running is not None:
                    self._wake.wait(self.settings.poll_interval)
                    self._wake.clear()
        finally:
            self.parts = None
            tracked.close()
            try:
                pipeline.close(self.settings.poll_interval * 10)
            finally:
                component.close()

    def _publication_allows(self, component: TrainingComponent, serving: str) -> str:
        """Where the engine's publication stands (a component published into an engine,
        :class:`PublicationWatch`): sets :attr:`paused` while the engine failed to take the
        last ``limit`` artifacts, and returns the artifact served now (the engine may have
        taken the newest since the job ended)."""
        if not isinstance(component, PublicationWatch):
            return serving
        publication = component.publication()
        if publication.served is not None and publication.served != serving:
            serving = publication.served
            self._note_served(serving)
        why = publication.paused
        if why is not None and self.paused is None:
            self._note_error("publication", RuntimeError(why))
        self.paused = why
        self._publication_failing = publication.failed_in_a_row > 0
        return serving

    def _count(self, name: str, value: int) -> None:
        if value > 0:
            self.job_counts[name] = self.job_counts.get(name, 0) + value

    def _note_served(self, artifact: str) -> None:
        """``artifact`` is served now: the last of :attr:`_served` (kept for the next tenure)."""
        if not self._served or self._served[-1] != artifact:
            self._served = [*self._served, artifact][-_SERVED_KEPT:]

    def _recover(
        self, pipeline: TrainingPipeline, component: TrainingComponent, state: TrainerState
    ) -> _RunningJob | None:
        """Take over the job a previous tenure left running, or replay the last outcome to
        the fresh stage and the plugins before any other call (P-PIPE-13)."""
        body = state.running_job(self.name)
        last = pipeline.last_job_outcome()
        running = None if body is None else _RunningJob.from_json(body)
        if running is not None and last is not None and last.job_id == running.job_id:
            # Ended, in a store that committed the end and the clearing apart (before they
            # were one step): only the clearing is missing.
            state.set_running_job(self.name, None)
            running = None
        if running is not None:
            # Asked of the store by the job's id: a submission that gave every sample back
            # (or an instruction without samples) consumes none, yet its commit may be missing.
            committed = pipeline.committed(running.job_id)
            outcome = component.poll(JobHandle(running.job_id, component.name))
            if committed:
                return running
            if outcome is not None and outcome.event == "finished":
                # It trained, and the crash came before the commit: commit it now, so its
                # samples never train again.
                pipeline.commit_recovered(
                    running.job_id,
                    running.sample_ids,
                    running.instruction_id,
                    released_record_ids=running.released_record_ids,
                    drops=running.drops,
                )
                return running
            # Never trained: the data goes back to the buffer, as released data does.
            state.set_running_job(self.name, None)
        if last is not None:
            self._announce_end(pipeline, last)
        return None

    def _read_records(
        self, records: RecordStore, cursor: Position | None, pipeline: TrainingPipeline
    ) -> tuple[Position | None, bool]:
        batch = records.read_after(cursor, limit=self.settings.record_batch)
        if batch:
            cursor = batch[-1].position
            # An evicted body is counted by the store when it evicts it.
            pipeline.push_many([s.record for s in batch if s.record is not None])
        return cursor, bool(batch)

    def _apply_settings(self, pipeline: TrainingPipeline, settings: ScenarioSettings) -> None:
        mode = settings.get(TRAINING_MODE_SETTING)
        if mode is not None and mode != pipeline.training_mode:
            try:
                pipeline.training_mode = mode
            except (ValueError, NotImplementedError) as exc:
                self._note_error("training_mode", exc)
        pipeline.queue_instructions(pipeline.unread_instructions())

    def _submit_next(
        self,
        pipeline: TrainingPipeline,
        component: TrainingComponent,
        state: TrainerState,
        history: JobHistory,
    ) -> _RunningJob | None:
        reserving = time.time()
        reservation = pipeline.reserve()
        if reservation is None:
            return None
        reserved = time.time()
        try:
            reservation.validate()  # before any hook sees it (P-PIPE-7)
            if self._plugins is not None:
                self._plugins.job_data_built(self.scenario, self.name, reservation.data)
                reservation = reservation.with_data(
                    self._plugins.before_submit(self.scenario, self.name, reservation.data)
                )
            consumed = reservation.consumed_sample_ids
        except Exception as exc:
            # Refused before anything was submitted: the data goes back to the buffer.
            reservation.release()
            self._note_error("before_submit", exc)
            return None
        data = reservation.data
        released = pipeline.releasable_record_ids()
        running = _RunningJob(
            data.id,
            consumed,
            reservation.instruction_id,
            tuple(released),
            pipeline.drops_of(released),
        )
        state.set_running_job(self.name, running.to_json())
        self._note_submission(history, data, running)
        try:
            component.submit(data, self._job_parameters)
        except Exception as exc:
            reservation.release()
            state.set_running_job(self.name, None)
            history.released(self.name, data.id, f"the component refused the job: {exc}")
            self._note_error("submit", exc)
            return None
        reservation.commit(released_record_ids=released)
        submitted = self._training_since[data.id] = time.time()
        self._step(data.id, "reserve", reserving, reserved)
        self._step(data.id, "submit", reserved, submitted)
        logger.info(
            "scenario %s, trainer %s: submitted %s (%d samples, %d given back)",
            self.scenario,
            self.name,
            data.id,
            len(data.samples),
            len(data.given_back),
        )
        return running

    def _note_submission(self, history: JobHistory, data: JobData, running: _RunningJob) -> None:
        """Write the job into the history: each consumed sample, whether it goes to the
        component and with which reward, and what the extensions say of it."""
        provenance: JSON = {}
        if self._plugins is not None:
            try:
                provenance = self._plugins.job_provenance(self.scenario, self.name, data)
                json.dumps(provenance, allow_nan=False)  # stored as JSON: refused here, not there
            except Exception as exc:  # a plugin's account of a job never stops training
                provenance = {}
                self._note_error("job_provenance", exc)

        def said(sample_id: str) -> JSON:
            found: JSON = {}
            for extension, entry in provenance.items():
                samples = entry.get("samples") if isinstance(entry, Mapping) else None
                if isinstance(samples, Mapping) and sample_id in samples:
                    found[extension] = samples[sample_id]
            return found

        submitted = {str(s.sample_id): s for s in data.samples}
        history.submitted(
            self.name,
            data.id,
            [
                SampleOfJob(
                    sample_id,
                    sample_id in submitted,
                    sample_reward(submitted[sample_id]) if sample_id in submitted else None,
                    said(sample_id),
                )
                for sample_id in dict.fromkeys([*submitted, *running.sample_ids])
            ],
            instruction_id=running.instruction_id,
            extensions={
                extension: entry["job"]
                for extension, entry in provenance.items()
                if isinstance(entry, Mapping) and "job" in entry
            },
        )

    def _announce_end(self, pipeline: TrainingPipeline, outcome: JobOutcome) -> None:
        """Hand a durably recorded job end to the pipeline, then to the plugins."""
        pipeline.job_ended(outcome)
        if self._plugins is not None:
            self._plugins.job_ended(self.scenario, self.name, outcome)

    def _end_job(
        self, pipeline: TrainingPipeline, component: TrainingComponent, outcome: JobOutcome
    ) -> str:
        # One durable step: the outcome, the history's end and the cleared running job. A
        # crash after it replays the outcome first (P-PIPE-13); one before it finds the job
        # running and asks the component again.
        trained = time.time()
        since = self._training_since.pop(outcome.job_id, None)
        if since is not None:  # submitted by this process, not by a previous tenure
            self._step(outcome.job_id, "train", since, trained)
        pipeline.record_job_outcome(outcome)
        self._announce_end(pipeline, outcome)
        artifact = component.publish()
        self._step(outcome.job_id, "publish", trained, time.time())
        if self.observer is not None:
            self.observer.job_ended(self.scenario, self.name, outcome)
        self.jobs_ended += 1
        for name in COUNTED_METRICS:
            value = outcome.metrics.get(name)
            if isinstance(value, int) and not isinstance(value, bool):
                self._count(name, value)
        if outcome.event == "failed":
            self._note_error("job", RuntimeError(f"job {outcome.job_id}: {outcome.error}"))
        logger.info(
            "scenario %s, trainer %s: job %s %s; serving %s",
            self.scenario,
            self.name,
            outcome.job_id,
            outcome.event,
            artifact.artifact_id,
        )
        return artifact.artifact_id

    def _step(self, job_id: str, step: str, started: float, ended: float) -> None:
        if self.observer is not None:
            self.observer.job_step(self.scenario, self.name, job_id, step, started, ended)

    # -- status ----------------------------------------------------------------------------

    def _note_error(self, where: str, exc: BaseException) -> None:
        detail = traceback.format_exception_only(exc)[-1].strip()
        self._errors = [*self._errors, {"at": time.time(), "where": where, "error": detail}][
            -_LAST_ERRORS:
        ]

    def snapshot(
        self, pipeline: TrainingPipeline, running: _RunningJob | None, serving: str | None
    ) -> JSON:
        """The status snapshot (see ``docs/trainer.md`` for its keys)."""
        status = pipeline.status()
        # The pipeline's queue holds instructions read from the store and not yet consumed,
        # so the unread ones in the store are its queue plus those not read yet.
        unread = [i.request_id for i in pipeline.unread_instructions()]
        extensions: JSON = {}
        if self._plugins is not None:
            try:
                extensions = self._plugins.scenario_status(self.scenario)
            except Exception as exc:  # an extension's status never stops training
                self._note_error("scenario_status", exc)
        return {
            "scenario": self.scenario,
            "trainer": self.name,
            "holder": self.holder,
            "training_mode": pipeline.training_mode,
            "ready_samples": status.get("ready_samples", 0),
            "buffer_size": status["buffer_size"],
            "job_samples": pipeline.job_samples,
            "pending_instructions": len(unread),
            "queued_instructions": unread,
            "background_jobs_running": pipeline.background_jobs_running(),
            "running_job": None if running is None else running.to_json(),
            "jobs_ended": self.jobs_ended,
            "job_counts": dict(self.job_counts),
            "paused": self.paused,
            "served_artifact_id": serving,
            "served_artifact": serving,
            "served_artifacts": list(self._served),
            "drops": {
                "trainer": status.get("dropped", {}),
                "scenario": status.get("scenario_dropped", {}),
                "stale_samples": status.get("stale_samples", 0),
                "held_with_stale_group": status.get("held_with_stale_group", 0),
                "refused_samples": status.get("refused_samples", 0),
            },
            "last_errors": list(self._errors),
            "pipeline": status,
            "extensions": extensions,
            "trackers": {} if self._tracked is None else self._tracked.status(),
            "updated_at": time.time(),
        }
