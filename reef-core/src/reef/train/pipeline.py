"""``TrainingPipeline``: the one object a trainer gives records to and takes job data from.

It composes a scenario's two stages with the scenario's sample store (P-PIPE-1). Recipes do not
subclass it. The trainer calls it on its own thread, under its lock; no call blocks on anything
but the local store (P-PIPE-2).

- Records go in (``push``, ``produce``); each unit the record-to-sample stage makes ready is
  stored with the ids of its records in one transaction (P-SET-16), under the ids
  ``<trainer>:<s>:<i>`` or ``<s>:<i>`` (P-SET-18).
- The buffer is computed from the store, the same way in every mode (P-BUF-*): the trainer's
  untrained samples in store order (read incrementally, so its cost never depends on how many
  samples trained), one kind, stale samples left out with their groups, the first
  ``buffer_size`` samples and the rest of the groups they touch.
- Each job's samples train with the reward a person labelled them with, where one did
  (:class:`reef.storage.SampleLabels`, read when the job is built; the stored sample is kept as
  it came).
- Job data is reserved in memory until acknowledged or released. Acknowledgement commits the
  submission in the store (train counts, instruction, released records) in one transaction. It
  consumes every reserved sample except those the submission gives back (``JobData.given_back``,
  whole groups), which return to the buffer untrained. A restart forgets every reservation:
  reserved, unacknowledged data is released (Recovery).

Recovery is construction: a new pipeline on the same store skips every record its trainer's
stored samples consumed (the stage sees them as taken, never makes their samples again), reads
the untrained samples back, and hands the stage the last job outcome before any other call.
Whether a pushed record was consumed is asked of the store, one indexed query per pushed batch
(:meth:`TrainingPipeline.push_many`), so the pipeline never holds the ids of its whole history.

Nothing that will never train is silent (docs/decisions.md#counting-what-did-not-train). A
record the stage ends is counted by reason in the store's drop counts in the transaction of the
commit that names it (the commit that makes its end durable), so a crash can neither lose nor
double the count; ``status()`` shows the durable counts beside the ends that wait for their
commit, and the samples that stay in the store untrained (stale, or uploads refused at read
time) as they are now.

Why this module is long: it is the contract's one ``TrainingPipeline`` object, and each of its
calls is a few lines over the store and the stages. What has a life of its own lives beside it:
the buffer and staleness verdicts in :mod:`reef.train.buffer`, reserved job data in
:mod:`reef.train.reservation`. The sections left here (records in, the buffer, job data, modes
and instructions) all read and change the same reservations, instructions and untrained
samples, so cutting them apart would give classes that share private state, not modules that
stand alone.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs

from reef.core.job_data import (
    JobData,
    JobOutcome,
    Sample,
    SampleFormatError,
    TaskSample,
    TrainingInstruction,
    TrajectorySample,
    sample_body,
    sample_from_body,
)
from reef.core.records import JSON, Record
from reef.errors import ReefError
from reef.pipeline_context import PipelineContext, TrainingMode, check_training_mode
from reef.record2sample.stage import Record2Sample
from reef.sample2job.stage import Sample2Job
from reef.sample2job.validation import validate_job_data
from reef.storage.drops import DropCounters
from reef.storage.labels import SampleLabels
from reef.storage.positions import Position
from reef.storage.samples import NewSample, StoredSample, TrainerSamples
from reef.storage.stale_samples import StaleSamples
from reef.train.buffer import Entry, UntrainedSamples
from reef.train.reservation import JobReservation
from reef.train.stages import close_stages

logger = logging.getLogger(__name__)

#: How many candidate data ids one store query checks when a job starts with a sample an
#: earlier commit gave back (see :meth:`TrainingPipeline.build_job_data`).
_ID_PROBE = 16


class GivenBackError(ReefError, ValueError):
    """A submission gives back samples it may not: ones its job data did not reserve, or part
    of a group whose other members it consumes (a group trains in one job, P-BUF-5)."""


class TrainingPipeline:
    """A scenario trainer's pipeline; see the module docstring.

    :param record2sample: the scenario's record-to-sample stage.
    :param sample2job: the scenario's sample-to-job stage.
    :param samples: the scenario's sample store.
    :param context: the context both stages were built with.
    :param clock: the time ``produce`` advances the stage to (Unix seconds).
    :param replay_last_outcome: hand the stage the trainer's last job outcome now, before any
        other call (P-PIPE-13); the trainer passes False when a job of it still runs.
    :raises NotImplementedError: when the sample-to-job stage does not support the context's
        training mode.
    """

    def __init__(
        self,
        record2sample: Record2Sample,
        sample2job: Sample2Job,
        *,
        samples: TrainerSamples,
        context: PipelineContext,
        clock: Callable[[], float] = time.time,
        replay_last_outcome: bool = True,
    ) -> None:
        self.record2sample = record2sample
        self.sample2job = sample2job
        self.samples = samples
        self.context = context
        self._clock = clock
        self._mode = self._supported(context.training_mode)
        self._trainer = context.trainer
        samples.register_trainer(self._trainer, reads_uploads=sample2job.accepts_trajectories)
        if replay_last_outcome:
            last = self.last_job_outcome()
            if last is not None:
                record2sample.job_ended(last)
        self._untrained = UntrainedSamples(record2sample.is_stale, self._counts)
        self._serving: str | None = None
        self._stale_marks = StaleSamples(samples.database, context.scenario)
        self._labels = SampleLabels(samples.database, context.scenario)
        self._cursor: Position | None = None
        # Samples refused at read time (unreadable, or uploads uploaded_sample refuses): they
        # stay untrained in the store; kept to warn once and to show in status.
        self._refused: set[str] = set()
        self._reserved: dict[str, JobReservation] = {}
        self._instructions: list[TrainingInstruction] = []

    # -- records in ------------------------------------------------------------------------

    def push(self, record: Record) -> None:
        """One record arrives (in store order); store the units that became ready (P-PIPE-3).

        A record that this trainer consumed (its stored samples, or a commit that ended it)
        goes to the stage only as taken: a restart never makes a stored sample again
        (P-SET-20).
        """
        self.push_many((record,))

    def push_many(self, records: Sequence[Record]) -> None:
        """:meth:`push` each of ``records``, in order, asking the store once which of them this
        trainer consumed (the trainer reads the record store in batches)."""
        consumed = self.samples.consumed_among(self._trainer, [r.id for r in records])
        for record in records:
            if record.id in consumed:
                self.record2sample.replay_consumed(record)
                continue
            self.record2sample.push(record)
            self._store_samples()

    def produce(self) -> None:
        """Advance the stage to now and store what became ready (P-PIPE-4, P-STG-6)."""
        self.record2sample.advance(self._clock())
        self._store_samples()

    def _store_samples(self) -> None:
        stage = self.record2sample
        for unit in stage.ready_units():
            new = [
                self._new_sample(self.context.sample_id(set_id, index), sample)
                for set_id, set_samples in stage.unit_samples(unit)
                for index, sample in enumerate(set_samples)
            ]
            self.samples.add_record_samples(self._trainer, new, unit.record_ids)
            stage.consume(unit)
        made = stage.made_samples()
        if made:
            self.samples.add_samples(
                self._trainer,
                [self._new_sample(self.context.made_sample_id(name), s) for name, s in made],
            )

    @staticmethod
    def _new_sample(sample_id: str, sample: Sample) -> NewSample:
        return NewSample(sample_id, sample.kind, sample_body(sample))

    # -- the buffer ------------------------------------------------------------------------

    def advance(self) -> None:
        """Read the samples stored since the last call (P-PIPE-5); reserves nothing."""
        for stored in self.samples.untrained(self._trainer, after_position=self._cursor):
            self._cursor = stored.position
            entry = self._entry(stored)
            if entry is not None:
                self._untrained.add(entry)

    def _entry(self, stored: StoredSample) -> Entry | None:
        try:
            sample = sample_from_body(
                stored.kind, stored.body, sample_id=stored.id, group_id=stored.group_id
            )
        except SampleFormatError as exc:
            if stored.id not in self._refused:
                logger.warning("sample %r cannot be read, it stays untrained: %s", stored.id, exc)
                self._refused.add(stored.id)
            return None
        if stored.origin == "upload" and isinstance(sample, TrajectorySample):
            try:
                uploaded = self.record2sample.uploaded_sample(sample.trajectory)
            except ValueError as exc:
                # Skipped, never consumed: a later stage version may take it (P-UP-6).
                if stored.id not in self._refused:
                    logger.warning("uploaded trajectory %r skipped: %s", stored.id, exc)
                    self._refused.add(stored.id)
                return None
            sample = attrs.evolve(uploaded, sample_id=stored.id, group_id=stored.group_id)
        return Entry(stored.position, stored.origin, sample)

    def _counts(self, entry: Entry) -> bool:
        sample = entry.sample
        if isinstance(sample, TaskSample):
            if sample.split != "train":
                return False  # eval tasks run in evaluations, never in a job (P-BUF-2)
            if entry.origin == "upload" and not self.sample2job.accepts_imported_tasks:
                return False
        return True

    def _handed_out(self) -> set[str]:
        return {sid for r in self._reserved.values() for sid in r.sample_ids}

    def _auto_buffer(self) -> list[Entry]:
        # In auto a kind without job parameters does not count (P-BUF-3).
        return self._untrained.auto_buffer(
            self.sample2job.job_parameter_kinds,
            handed_out=self._handed_out(),
            limit=self.sample2job.buffer_size,
        )

    def _manual_buffer(self) -> list[Entry]:
        # The client's choice, limited to what this trainer has not trained (a sample trains
        # once per trainer, whoever chose it), plus the rest of each group it touches: a
        # unit's samples train in the same job (P-SET-19, P-BUF-5).
        handed_out = self._handed_out()
        chosen = [
            entry
            for stored in self.samples.manual_buffer(self._trainer)
            if stored.id not in handed_out and (entry := self._untrained.get(stored.id))
        ]
        groups = {e.sample.group_id for e in chosen if e.sample.group_id is not None}
        ids = {e.sample_id for e in chosen}
        mates = [
            e
            for e in self._untrained.group_mates(groups)
            if e.sample_id not in ids and e.sample_id not in handed_out
        ]
        return self._untrained.buffer_of(sorted(chosen + mates, key=lambda e: e.position))

    def _forget_removed_uploads(self, buffer: list[Entry]) -> bool:
        # An upload whose item left the scenario is forgotten (P-UP-2): check the buffer's
        # uploads against the store, a query bounded by the buffer's size. True when some were.
        uploads = [str(e.sample.sample_id) for e in buffer if e.origin == "upload"]
        if not uploads:
            return False
        present = {s.id for s in self.samples.get(uploads)}
        gone = [u for u in uploads if u not in present]
        self._untrained.remove(gone)
        return bool(gone)

    def buffer(self) -> tuple[Sample, ...]:
        """The samples the next job would take, in store order (no reservation)."""
        self.advance()
        return self._read_buffer()

    def _read_buffer(self) -> tuple[Sample, ...]:
        # The buffer of the samples read so far (buffer() reads the new ones first), computed
        # from what remains once the removed uploads it held are forgotten: their places go
        # to the samples after them (P-BUF-5), so it is computed again until none was removed.
        while True:
            entries = self._manual_buffer() if self._mode == "manual" else self._auto_buffer()
            if not self._forget_removed_uploads(entries):
                return tuple(e.sample for e in entries)

    def ready(self, sample_count: int | None) -> bool:
        """Whether job data of ``sample_count`` samples is available (P-PIPE-6).

        Auto: the buffer holds ``sample_count`` samples (``None``: never). Manual: an
        instruction waits and its manual buffer holds a sample, or the sample-to-job stage
        reads instructions (P-MODE-5, P-MODE-6).
        """
        return self._ready(sample_count, self._read_buffer)

    def _ready(self, sample_count: int | None, buffer: Callable[[], tuple[Sample, ...]]) -> bool:
        # ``buffer`` is asked only when the answer needs it: reserve() passes one that keeps
        # what it read, so a job builds its buffer once.
        self.advance()
        if self._mode == "manual":
            instruction = self._next_instruction()
            if instruction is None:
                return False
            return self.sample2job.reads_instructions or bool(buffer())
        if sample_count is None:
            return False
        return len(buffer()) >= sample_count

    def _next_instruction(self) -> TrainingInstruction | None:
        reserved = {r.instruction.request_id for r in self._reserved.values() if r.instruction}
        return next((i for i in self._instructions if i.request_id not in reserved), None)

    def build_job_data(self, sample_count: int | None) -> JobData | None:
        """The buffer's job data, reserved until acknowledged or released (P-PIPE-7).

        ``None`` when :meth:`ready` is false. The data of :meth:`reserve`'s reservation.
        """
        reservation = self.reserve(sample_count)
        return None if reservation is None else reservation.data

    def reserve(self, sample_count: int | None = None) -> JobReservation | None:
        """Reserve the buffer's job data (P-PIPE-7): a :class:`JobReservation` that the caller
        commits after submitting it, or releases; ``None`` when :meth:`ready` is false.

        ``sample_count`` defaults to the sample-to-job stage's ``job_samples``. Ids:
        ``<scenario>:data:<number>`` in auto (the number is the store sequence of the job's first
        sample; when an earlier commit gave that sample back, ``<seq>.<k>`` with the first ``k``
        no commit of the trainer used, so ids stay unique),
        ``<scenario>:instruction:<request id>`` in manual (P-MODE-8).
        """
        if sample_count is None:
            sample_count = self.sample2job.job_samples
        buffer = functools.cache(self._read_buffer)
        if not self._ready(sample_count, buffer):
            return None
        samples = self._labelled(buffer())
        instruction = self._next_instruction() if self._mode == "manual" else None
        if instruction is not None:
            data_id = f"{self.context.scenario}:instruction:{instruction.request_id}"
        else:
            first = self._untrained.get(str(samples[0].sample_id))
            assert first is not None  # the buffer holds untrained samples only
            data_id = self._unused_data_id(f"{self.context.scenario}:data:{first.position.seq}")
        data = self.sample2job.make_job_data(samples, data_id)
        if data.id != data_id:
            raise ValueError(
                f"{type(self.sample2job).__name__}.make_job_data named its data {data.id!r},"
                f" not {data_id!r}"
            )
        if instruction is not None:
            data = attrs.evolve(data, request=instruction)
        reservation = JobReservation(
            data, tuple(str(s.sample_id) for s in samples), instruction, pipeline=self
        )
        self._reserved[data_id] = reservation
        return reservation

    def _labelled(self, samples: tuple[Sample, ...]) -> tuple[Sample, ...]:
        # A person's label replaces a trajectory's reward for the job; one query per job.
        trajectories = [str(s.sample_id) for s in samples if isinstance(s, TrajectorySample)]
        labels = self._labels.in_force(trajectories)
        return tuple(
            attrs.evolve(s, reward=labels[str(s.sample_id)])
            if isinstance(s, TrajectorySample) and str(s.sample_id) in labels
            else s
            for s in samples
        )

    def validate_job_data(self, data: JobData) -> None:
        """Check ``data`` against the sample-to-job stage's ``output_schema`` (P-PIPE-7).

        :raises JobDataError: naming the data, the stage, the path and the reason.
        """
        validate_job_data(self.sample2job, data)

    def _unused_data_id(self, base: str) -> str:
        # A sample given back stays first in store order, so the next job would take its id
        # again; the store commits an id once, and an extension (Agent ECC's journal) keys its
        # decision by it. Released (uncommitted) data keeps its id: it is the same submission.
        start = 0
        while True:
            names = [base if k == 0 else f"{base}.{k}" for k in range(start, start + _ID_PROBE)]
            taken = self.samples.submitted_among(self._trainer, names)
            free = next((name for name in names if name not in taken), None)
            if free is not None:
                return free
            start += _ID_PROBE

    def release_job_data(self, data_id: str) -> None:
        """Give reserved job data back unsubmitted: its samples stay in the buffer (P-PIPE-8)."""
        self._reserved.pop(data_id, None)

    def consumed_sample_ids(self, data_id: str, given_back: Iterable[str] = ()) -> tuple[str, ...]:
        """The samples the commit of reserved ``data_id`` consumes, in store order: every
        reserved sample, submitted or removed by the recipe (P-REP-6), except ``given_back``.

        :raises KeyError: when ``data_id`` is not reserved.
        :raises GivenBackError: when ``given_back`` names a sample the data did not reserve, or
            part of a group whose other members the commit consumes.
        """
        reservation = self._reserved[data_id]
        back = set(given_back)
        unknown = sorted(back.difference(reservation.sample_ids))
        if unknown:
            raise GivenBackError(
                f"job data {data_id!r} gives back samples it did not reserve: {unknown}"
            )
        consumed = tuple(sid for sid in reservation.sample_ids if sid not in back)
        split = sorted(self._groups_of(back) & self._groups_of(consumed))
        if split:
            raise GivenBackError(
                f"job data {data_id!r} gives back part of group(s) {split} and consumes the rest:"
                " a group trains in one job (P-BUF-5)"
            )
        return consumed

    def _groups_of(self, sample_ids: Iterable[str]) -> set[str]:
        entries = (self._untrained.get(sid) for sid in sample_ids)
        return {e.sample.group_id for e in entries if e is not None and e.sample.group_id}

    def acknowledge(
        self,
        data_id: str,
        *,
        released_record_ids: Iterable[str] = (),
        given_back: Iterable[str] = (),
    ) -> tuple[str, ...]:
        """Commit the submission of reserved job data (P-PIPE-9).

        In one transaction the store adds one to this trainer's train count of each sample the
        commit consumes (:meth:`consumed_sample_ids`: the reservation less ``given_back``),
        consumes the instruction (manual) and the ``released_record_ids`` (the records the
        stage ended, P-STALE-1), and counts each released record that ended without training
        under its reason (docs/decisions.md#counting-what-did-not-train). The samples given
        back return to the buffer untrained, for a later job. A job that later fails keeps its
        samples trained (P-PIPE-10).

        :returns: ``sample:<id>`` for each consumed sample, then ``instruction:<request id>``
            in manual.
        :raises KeyError: when ``data_id`` is not reserved.
        :raises GivenBackError: as :meth:`consumed_sample_ids` (nothing is committed).
        """
        reservation = self._reserved[data_id]
        consumed = self.consumed_sample_ids(data_id, given_back)
        instruction = reservation.instruction
        released = tuple(dict.fromkeys(released_record_ids))
        drops = self.drops_of(released)
        self.samples.commit_submission(
            self._trainer,
            data_id,
            consumed,
            None if instruction is None else instruction.request_id,
            released_record_ids=released,
            drops=drops,
        )
        del self._reserved[data_id]
        # The commit made these ends durable: forget them, so no later commit counts them again.
        self.record2sample.release_records(released)
        self._untrained.remove(consumed)
        ids = tuple(f"sample:{sample_id}" for sample_id in consumed)
        if instruction is not None:
            self._instructions.remove(instruction)
            ids += (f"instruction:{instruction.request_id}",)
        return ids

    def drops_of(self, released_record_ids: Iterable[str]) -> dict[str, int]:
        """How many of the released records ended without training, by reason: what their
        commit adds to the trainer's drop counts."""
        ended = self.record2sample.ended_records()
        return dict(Counter(ended[rid] for rid in set(released_record_ids) if rid in ended))

    # -- what the trainer keeps in the store beside the buffer -----------------------------

    def committed(self, data_id: str) -> bool:
        """Whether this trainer committed the submission of job data ``data_id``."""
        return bool(self.samples.submitted_among(self._trainer, [data_id]))

    def commit_recovered(
        self,
        data_id: str,
        sample_ids: Sequence[str],
        instruction_id: str | None,
        *,
        released_record_ids: Iterable[str] = (),
        drops: Mapping[str, int] | None = None,
    ) -> bool:
        """Commit a submission that a crash left uncommitted and that the component trained
        (Recovery): the reservation died with the crashed process, so its samples, instruction,
        released records and their drop counts (:meth:`drops_of` at the submission) come from
        the trainer's record of the running job. Idempotent.

        :returns: True when committed now; False when it was committed already.
        """
        return self.samples.commit_submission(
            self._trainer,
            data_id,
            sample_ids,
            instruction_id,
            released_record_ids=released_record_ids,
            drops=drops,
        )

    def record_job_outcome(self, outcome: JobOutcome) -> None:
        """Make a job's end durable in one transaction, before anyone acts on it
        (:meth:`job_ended`, the plugins): this trainer's last job outcome, the job history's
        end, a failed job's drop count and the trainer's running job cleared
        (:meth:`reef.storage.TrainerSamples.record_job_outcome`)."""
        self.samples.record_job_outcome(self._trainer, attrs.asdict(outcome))

    def last_job_outcome(self) -> JobOutcome | None:
        """This trainer's last durable job outcome; ``None`` before its first job ended."""
        last = self.samples.last_job_outcome(self._trainer)
        return None if last is None else JobOutcome(**last)

    def unread_instructions(self) -> tuple[TrainingInstruction, ...]:
        """The training instructions in the store this trainer has not consumed, oldest first
        (P-MODE-3); :meth:`queue_instructions` queues them in the pipeline."""
        return tuple(
            TrainingInstruction(
                request_id=i.request_id,
                text=i.body.get("text"),
                parameters=dict(i.body.get("parameters") or {}),
            )
            for i in self.samples.unread_instructions(self._trainer)
        )

    # -- training modes and instructions ---------------------------------------------------

    def _supported(self, mode: str) -> TrainingMode:
        checked = check_training_mode(mode)
        if checked not in self.sample2job.supported_training_modes:
            raise NotImplementedError(
                f"{type(self.sample2job).__name__} does not support training mode {checked!r}"
            )
        return checked

    @property
    def training_mode(self) -> TrainingMode:
        """The pipeline's training mode (P-MODE-1)."""
        return self._mode

    @training_mode.setter
    def training_mode(self, mode: str) -> None:
        """Select ``auto`` or ``manual`` on this pipeline (P-MODE-13).

        From auto to manual, the automatic buffer joins the manual buffer (P-MODE-7). Reserved
        data stays as it is.

        :raises ValueError: for a name that is no training mode.
        :raises NotImplementedError: for a mode the sample-to-job stage does not support.
        """
        checked = self._supported(mode)
        if self._mode == "auto" and checked == "manual":
            moved = [str(s.sample_id) for s in self.buffer()]
            if moved:
                self.samples.insert_into_manual_buffer(self._trainer, moved)
        self._mode = checked

    def queue_instructions(self, instructions: Iterable[TrainingInstruction]) -> None:
        """Queue training instructions, oldest first; one already queued stays once
        (P-MODE-10)."""
        queued = {i.request_id for i in self._instructions}
        for instruction in instructions:
            if instruction.request_id not in queued:
                self._instructions.append(instruction)
                queued.add(instruction.request_id)

    @property
    def job_samples(self) -> int | None:
        """The fewest samples one job trains (the sample-to-job stage's, P-SIZE-1)."""
        return self.sample2job.job_samples

    @property
    def buffered_requests(self) -> int:
        """How many instructions the pipeline holds (part of ``pending_instructions``)."""
        return len(self._instructions)

    def insert_into_buffer(self, sample_ids: Sequence[str]) -> None:
        """Choose samples for the manual buffer (P-MODE-5)."""
        self.samples.insert_into_manual_buffer(self._trainer, sample_ids)

    def remove_from_buffer(self, sample_ids: Sequence[str]) -> None:
        """Take samples out of the manual buffer."""
        self.samples.remove_from_manual_buffer(self._trainer, sample_ids)

    # -- the stages' other hooks -----------------------------------------------------------

    def observe_serving_artifact_id(self, artifact_id: str) -> None:
        """The scenario serves ``artifact_id`` now (P-STALE-5): a new one ages the untrained
        samples, so each is judged again."""
        self.record2sample.observe_serving_artifact_id(artifact_id)
        if artifact_id != self._serving:
            self._serving = artifact_id
            self._untrained.rejudge()

    def made_samples(self) -> None:
        """Store the samples the stage made from no record set (P-PIPE-11)."""
        self._store_samples()

    def job_ended(self, outcome: JobOutcome) -> None:
        """A job's end is durable: hand its outcome to the stage (P-PIPE-12)."""
        self.record2sample.job_ended(outcome)

    def releasable_record_ids(self) -> tuple[str, ...]:
        """Records the stage is done with and no held set references (P-PIPE-16)."""
        return self.record2sample.releasable_record_ids()

    def release_records(self, record_ids: Iterable[str]) -> None:
        """Free the memory of records a successful commit named."""
        self.record2sample.release_records(record_ids)

    def admit_reports_of(self, report_type: str) -> None:
        """Admit another component's reports: the stage releases them (P-PIPE-20)."""
        admitted = self.context.admitted_report_types | {report_type}
        self.context_changed(attrs.evolve(self.context, admitted_report_types=admitted))

    def context_changed(self, context: PipelineContext) -> None:
        """Hand both stages an updated context."""
        self.context = context
        self.record2sample.context_changed(context)
        self.sample2job.context = context
        self._untrained.rejudge()

    def status(self) -> JSON:
        """The stages' status merged, with ``ready_samples`` and ``buffer_size`` (P-BUF-8), and
        what will not train, by reason (docs/decisions.md#counting-what-did-not-train).

        ``dropped``: this trainer's durable counts (records ended by committed jobs);
        ``scenario_dropped``: the scenario's own (evicted bodies); ``ending_records``: ends
        that wait for the commit that makes them durable; ``stale_samples`` and
        ``refused_samples``: samples that stay in the store untrained, as they are now;
        ``held_with_stale_group``: fresh samples held out of the buffer because a member of
        their group is stale (P-BUF-4), as they are now.
        """
        ready = len(self.buffer())
        counts = DropCounters(self.samples.database, self.context.scenario).counts()
        ending = Counter(self.record2sample.ended_records().values())
        return {
            **self.record2sample.status(),
            **self.sample2job.status(),
            "training_mode": self._mode,
            "ready_samples": ready,
            "buffer_size": self.sample2job.buffer_size,
            "reserved_job_data": len(self._reserved),
            "buffered_requests": self.buffered_requests,
            "dropped": dict(sorted(counts.get(self._trainer, {}).items())),
            "scenario_dropped": dict(sorted(counts.get(None, {}).items())),
            "ending_records": dict(sorted(ending.items())),
            "stale_samples": self._untrained.stale_count,
            "held_with_stale_group": self._untrained.held_with_stale_group,
            "refused_samples": len(self._refused),
        }

    def stale_sample_ids(self) -> frozenset[str]:
        """The untrained samples this trainer leaves out of its buffer as stale, as judged now
        (P-BUF-4)."""
        return self._untrained.stale_ids()

    def write_stale_marks(self) -> None:
        """Write what changed in the stale set since the last call to the store's stale marks
        (``StaleSamples``), for other processes to show; the first call of a pipeline
        replaces every mark of its trainer. The cost is that of the change."""
        changes = self._untrained.take_stale_changes()
        if changes.whole is not None:
            self._stale_marks.replace(self._trainer, changes.whole)
        elif changes:
            self._stale_marks.change(self._trainer, added=changes.added, removed=changes.removed)

    def metrics(self) -> dict[str, float]:
        """The stages' metrics, merged."""
        return {**self.record2sample.metrics(), **self.sample2job.metrics()}

    def background_jobs_running(self) -> bool:
        """True while the record-to-sample stage runs background work (P-PIPE-14)."""
        return self.record2sample.background_jobs_running()

    def close(self, timeout: float | None = None) -> None:
        """Close both stages (P-PIPE-15); an error of either (a :class:`TimeoutError`) is
        raised after the other was closed too (see :func:`close_stages`)."""
        close_stages((self.record2sample, self.sample2job), timeout)
