"""The scenario's sample store, ``TrainerSamples``: what every trainer of a scenario trains from.

A sample is a JSON body of one kind (``"trajectory"`` or ``"task"``), stored under an id that
the caller gives. Samples come three ways:

- a unit's samples (:meth:`TrainerSamples.add_record_samples`), made by one trainer from
  records; stored together with the ids of the records they consume, in one transaction, so a
  crash leaves all of them or none; a unit of several samples shares a group;
- named samples (:meth:`TrainerSamples.add_samples`, the pipeline's ``made_samples``): no group,
  no consumed record, and storing one that is there already changes nothing;
- uploads (:meth:`TrainerSamples.add_upload`): samples of no component, read by every trainer
  registered to read uploads, until the item leaves the scenario
  (:meth:`TrainerSamples.remove_upload`).

Store order is the order of :class:`~reef.storage.positions.Position`: units in the order they
were stored, uploads interleaved by arrival.

Each trainer keeps its own consumption: the records it consumed, and a train count per sample
that :meth:`TrainerSamples.commit_submission` raises in the transaction that commits a job.
A trainer's untrained samples live in a table of their own, so reading them costs the same with a
million trained samples as with none.

The store also keeps each trainer's manual buffer, the queued training instructions, the last
job outcome of each trainer, all durable and idempotent by id.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypeAlias

import attrs
from sqlalchemy import Connection, Row, and_, delete, literal, select, tuple_, update

from reef.storage import json_values
from reef.storage.database import Database
from reef.storage.drops import add_drops
from reef.storage.errors import ConflictError, UnknownSampleError, UnknownTrainerError
from reef.storage.positions import Position, after, lock_store_order
from reef.storage.tables import (
    consumed_records,
    instruction_reads,
    instructions,
    job_outcomes,
    manual_buffer,
    pending_samples,
    sample_trains,
    samples,
    scenarios,
    submissions,
    trainers,
)
from reef.storage.upserts import (
    add_counts,
    dialect_insert,
    insert_or_ignore,
    insert_or_replace,
    insert_selected_or_ignore,
)

__all__ = ["Instruction", "NewSample", "SampleKind", "StoredSample", "TrainerSamples"]

SampleKind: TypeAlias = Literal["trajectory", "task"]
SampleOrigin: TypeAlias = Literal["record", "named", "upload"]
JSON: TypeAlias = dict[str, Any]

_KINDS: frozenset[str] = frozenset(("trajectory", "task"))


def _check_kind(_: object, __: attrs.Attribute[Any], kind: str) -> None:
    if kind not in _KINDS:
        raise ValueError(f"a sample's kind is 'trajectory' or 'task', not {kind!r}")


@attrs.frozen
class NewSample:
    """A sample to store.

    :ivar id: its id (``<trainer>:<s>:<i>``, ``<s>:<i>``, a named sample's name, an upload's
        trajectory id), unique within the scenario.
    :ivar kind: ``"trajectory"`` or ``"task"``.
    :ivar body: its JSON body (``reef.core.job_data.sample_body``).
    """

    id: str
    kind: SampleKind = attrs.field(validator=_check_kind)
    body: JSON


@attrs.frozen
class StoredSample:
    """A sample as the store holds it.

    :ivar position: its place in store order.
    :ivar id: its id.
    :ivar kind: ``"trajectory"`` or ``"task"``.
    :ivar body: its JSON body.
    :ivar group_id: the group of its unit, ``None`` when it trains alone.
    :ivar trainer: the trainer that made it; ``None`` for an upload.
    :ivar origin: ``"record"`` (a unit's sample), ``"named"`` or ``"upload"``.
    """

    position: Position
    id: str
    kind: SampleKind
    body: JSON
    group_id: str | None
    trainer: str | None
    origin: SampleOrigin


@attrs.frozen
class Instruction:
    """A queued training instruction (``POST`` by a client, run in manual mode).

    :ivar request_id: the client's request id; the instruction's id in the store.
    :ivar body: the instruction as the client gave it.
    """

    request_id: str
    body: JSON


def _stored(row: Row[Any]) -> StoredSample:
    return StoredSample(
        position=Position(row.commit_tx, row.seq),
        id=row.id,
        kind=row.kind,
        body=json_values.load(row.body),
        group_id=row.group_id,
        trainer=row.trainer,
        origin=row.origin,
    )


class TrainerSamples:
    """The sample store of one scenario, shared by its trainers (one per component).

    Every method is one transaction. Methods that take a ``trainer`` act for that trainer only:
    another trainer's consumption, train counts and manual buffer are untouched.
    """

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario
        self._registered: set[str] = set()
        # Statements of the hot paths, built once: SQLAlchemy then skips most of its work.
        self._insert_new_samples = (
            dialect_insert(database.dialect, samples)
            .values(commit_tx=0)
            .on_conflict_do_nothing()
            .returning(samples.c.seq, samples.c.commit_tx)
        )
        self._insert_consumed = dialect_insert(
            database.dialect, consumed_records
        ).on_conflict_do_nothing()

    @property
    def database(self) -> Database:
        """The database the store lives in (for the scenario's other stores, e.g. drop counts)."""
        return self._database

    # -- trainers -------------------------------------------------------------------------

    def register_trainer(self, trainer: str, *, reads_uploads: bool) -> None:
        """Make ``trainer`` a reader of this store (idempotent; call before reading).

        :param reads_uploads: whether the trainer trains uploaded trajectories (its sample-to-job
            stage accepts them). A trainer that reads uploads gets every upload it has not
            trained, including the ones stored before it registered; one that stops reading
            them forgets the waiting ones.
        """
        with self._database.write() as connection:
            self._lock_scenario(connection)
            insert_or_replace(
                connection,
                trainers,
                {"scenario": self.scenario, "trainer": trainer, "reads_uploads": reads_uploads},
                key=("scenario", "trainer"),
            )
            if reads_uploads:
                trained = select(literal(1)).where(
                    sample_trains.c.sample_seq == samples.c.seq,
                    sample_trains.c.trainer == trainer,
                )
                waiting = select(
                    literal(self.scenario), literal(trainer), samples.c.commit_tx, samples.c.seq
                ).where(
                    samples.c.scenario == self.scenario,
                    samples.c.origin == "upload",
                    samples.c.removed.is_(False),
                    ~trained.exists(),
                )
                insert_selected_or_ignore(
                    connection,
                    pending_samples,
                    ("scenario", "trainer", "commit_tx", "sample_seq"),
                    waiting,
                )
            else:
                uploads = select(samples.c.seq).where(
                    samples.c.scenario == self.scenario, samples.c.origin == "upload"
                )
                connection.execute(
                    delete(pending_samples).where(
                        pending_samples.c.scenario == self.scenario,
                        pending_samples.c.trainer == trainer,
                        pending_samples.c.sample_seq.in_(uploads),
                    )
                )
        self._registered.add(trainer)

    def _lock_scenario(self, connection: Connection) -> None:
        # Uploads and trainer registrations lock the scenario's row, so that on PostgreSQL an
        # upload and a registration never miss each other. SQLite's write lock does it already.
        insert_or_ignore(connection, scenarios, [{"scenario": self.scenario}])
        connection.execute(
            select(scenarios.c.scenario)
            .where(scenarios.c.scenario == self.scenario)
            .with_for_update()
        )

    def _check_registered(self, connection: Connection, trainer: str) -> None:
        if trainer in self._registered:
            return
        known = connection.execute(
            select(trainers.c.trainer).where(
                trainers.c.scenario == self.scenario, trainers.c.trainer == trainer
            )
        ).first()
        if known is None:
            raise UnknownTrainerError(self.scenario, trainer)
        self._registered.add(trainer)

    # -- storing samples ------------------------------------------------------------------

    def add_record_samples(
        self, trainer: str, unit_samples: Sequence[NewSample], consumed_record_ids: Iterable[str]
    ) -> bool:
        """Store one unit's samples and consume its records, in one transaction (P-SET-16).

        The samples of a unit of more than one sample share a group (the first sample's id).
        Storing the same unit again changes nothing.

        :returns: True when stored now; False when the unit was stored already.
        :raises ConflictError: when one of the ids is stored with other content, or the unit
            overlaps another stored unit.
        """
        if not unit_samples:
            raise ValueError("a unit has at least one sample")
        group = unit_samples[0].id if len(unit_samples) > 1 else None
        rows = [self._row(sample, trainer, "record", group) for sample in unit_samples]
        record_ids = sorted(set(consumed_record_ids))
        with self._database.write() as connection:
            # Insert first and look only when a row was there: storing a new unit, the common
            # case, costs no read.
            lock_store_order(connection, "samples", self.scenario)
            inserted = connection.execute(self._insert_new_samples, rows).all()
            if len(inserted) < len(rows):
                stored = self._stored_rows(connection, [row["id"] for row in rows])
                if inserted:
                    new = {position.seq for position in inserted}
                    taken = next(row.id for row in stored if row.seq not in new)
                    raise ConflictError("sample", taken, self.scenario)
                self._check_same(rows, stored)
                return False
            self._insert_pending(connection, inserted, [trainer])
            if record_ids:
                connection.execute(
                    self._insert_consumed,
                    [
                        {"scenario": self.scenario, "trainer": trainer, "record_id": record_id}
                        for record_id in record_ids
                    ],
                )
        return True

    def add_samples(self, trainer: str, named_samples: Sequence[NewSample]) -> int:
        """Store named samples of ``trainer`` (the pipeline's ``made_samples``, P-PIPE-11).

        No group, no consumed record. A sample whose id is stored already is left as it is.

        :returns: how many were stored now.
        """
        rows = {s.id: self._row(s, trainer, "named", None) for s in named_samples}
        with self._database.write() as connection:
            for row in self._stored_rows(connection, list(rows)):
                del rows[row.id]
            self._insert(connection, list(rows.values()), pending_for=[trainer])
        return len(rows)

    def add_upload(self, upload: NewSample) -> bool:
        """Store an uploaded trajectory: a sample of no component (P-UP-1).

        Every trainer registered to read uploads gets it as untrained. Storing the same upload
        again changes nothing. An upload that was removed (its item detached) is stored again
        as a new upload, at the end of store order, with its body as given now; each trainer
        keeps its train count of it, so one that trained it does not get it again (a sample
        trains at most once per trainer) and the others get it as untrained.

        :returns: True when stored now.
        :raises ConflictError: when the id is stored with other content, or is not an upload.
        """
        row = self._row(upload, None, "upload", None)
        with self._database.write() as connection:
            self._lock_scenario(connection)
            stored = self._stored_rows(connection, [upload.id])
            counts: dict[str, int] = {}
            if stored and not (stored[0].origin == "upload" and stored[0].removed):
                self._check_same([row], stored)
                return False
            if stored:
                counts = self._take_removed_upload(connection, stored[0].seq)
            readers = connection.execute(
                select(trainers.c.trainer).where(
                    trainers.c.scenario == self.scenario, trainers.c.reads_uploads.is_(True)
                )
            ).scalars()
            positions = self._insert(
                connection, [row], pending_for=[r for r in readers if not counts.get(r)]
            )
            if counts:
                connection.execute(
                    sample_trains.insert(),
                    [
                        {"sample_seq": positions[0].seq, "trainer": trainer, "count": count}
                        for trainer, count in counts.items()
                    ],
                )
        return True

    def _take_removed_upload(self, connection: Connection, seq: int) -> dict[str, int]:
        """Delete a removed upload's tombstone so that it can be stored again at a new place in
        store order; returns its train counts by trainer, which the new row keeps."""
        counts = {
            str(trainer): int(count)
            for trainer, count in connection.execute(
                select(sample_trains.c.trainer, sample_trains.c["count"]).where(
                    sample_trains.c.sample_seq == seq
                )
            )
        }
        connection.execute(delete(sample_trains).where(sample_trains.c.sample_seq == seq))
        connection.execute(delete(samples).where(samples.c.seq == seq))
        return counts

    def remove_upload(self, sample_id: str) -> bool:
        """The upload's item left the scenario: every trainer forgets it (P-UP-2).

        Its train counts are kept, its place in the buffers is not.

        :returns: True when an upload was removed now; False when there was none to remove.
        """
        with self._database.write() as connection:
            seq = connection.execute(
                update(samples)
                .where(
                    samples.c.scenario == self.scenario,
                    samples.c.id == sample_id,
                    samples.c.origin == "upload",
                    samples.c.removed.is_(False),
                )
                .values(removed=True)
                .returning(samples.c.seq)
            ).scalar_one_or_none()
            if seq is None:
                return False
            connection.execute(delete(pending_samples).where(pending_samples.c.sample_seq == seq))
            connection.execute(delete(manual_buffer).where(manual_buffer.c.sample_seq == seq))
        return True

    def _row(
        self, sample: NewSample, trainer: str | None, origin: SampleOrigin, group: str | None
    ) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "id": sample.id,
            "kind": sample.kind,
            "body": json_values.dump(sample.body),
            "group_id": group,
            "trainer": trainer,
            "origin": origin,
            "removed": False,
        }

    def _stored_rows(self, connection: Connection, ids: list[str]) -> list[Row[Any]]:
        if not ids:
            return []
        query = select(samples).where(samples.c.scenario == self.scenario, samples.c.id.in_(ids))
        return list(connection.execute(query))

    def _check_same(self, rows: list[dict[str, Any]], stored: list[Row[Any]]) -> None:
        by_id = {row.id: row for row in stored}
        compared = ("kind", "body", "group_id", "trainer", "origin")
        for row in rows:
            old = by_id.get(row["id"])
            if old is None or any(getattr(old, name) != row[name] for name in compared):
                raise ConflictError("sample", row["id"] if old else stored[0].id, self.scenario)

    def _insert(
        self, connection: Connection, rows: list[dict[str, Any]], *, pending_for: list[str]
    ) -> list[Row[tuple[int, int]]]:
        if not rows:
            return []
        lock_store_order(connection, "samples", self.scenario)
        positions = list(connection.execute(self._insert_new_samples, rows).all())
        self._insert_pending(connection, positions, pending_for)
        return positions

    def _insert_pending(
        self,
        connection: Connection,
        positions: Sequence[Row[tuple[int, int]]],
        trainers_: list[str],
    ) -> None:
        pending = [
            {
                "scenario": self.scenario,
                "trainer": trainer,
                "commit_tx": position.commit_tx,
                "sample_seq": position.seq,
            }
            for trainer in trainers_
            for position in positions
        ]
        if pending:
            connection.execute(pending_samples.insert(), pending)

    # -- reading --------------------------------------------------------------------------

    def untrained(
        self, trainer: str, *, after_position: Position | None = None, limit: int | None = None
    ) -> list[StoredSample]:
        """The samples ``trainer`` reads and has not trained, in store order (P-BUF-2).

        Its own samples and the uploads it reads. The cost depends on the untrained samples
        only, never on how many it trained. Samples are written in store order
        (:mod:`reef.storage.positions`), so reading on from the last position is safe.

        :param after_position: only the samples after this position (an incremental read).
        :param limit: the most samples to return.
        :raises UnknownTrainerError: when ``trainer`` never registered.
        """
        query = (
            select(samples)
            .join(pending_samples, pending_samples.c.sample_seq == samples.c.seq)
            .where(
                pending_samples.c.scenario == self.scenario,
                pending_samples.c.trainer == trainer,
            )
            .order_by(pending_samples.c.commit_tx, pending_samples.c.sample_seq)
            .limit(limit)
        )
        with self._database.read() as connection:
            self._check_registered(connection, trainer)
            query = query.where(
                after(pending_samples.c.commit_tx, pending_samples.c.sample_seq, after_position)
            )
            return [_stored(row) for row in connection.execute(query)]

    def get(self, sample_ids: Sequence[str]) -> list[StoredSample]:
        """The stored samples with these ids (removed uploads excluded), in store order."""
        query = (
            select(samples)
            .where(
                samples.c.scenario == self.scenario,
                samples.c.id.in_(list(sample_ids)),
                samples.c.removed.is_(False),
            )
            .order_by(samples.c.commit_tx, samples.c.seq)
        )
        with self._database.read() as connection:
            return [_stored(row) for row in connection.execute(query)]

    def consumed_record_ids(self, trainer: str) -> frozenset[str]:
        """The ids of the records ``trainer`` consumed: recovery skips them (P-SET-20)."""
        query = select(consumed_records.c.record_id).where(
            consumed_records.c.scenario == self.scenario, consumed_records.c.trainer == trainer
        )
        with self._database.read() as connection:
            return frozenset(connection.execute(query).scalars())

    def consumed_among(self, trainer: str, record_ids: Sequence[str]) -> frozenset[str]:
        """Which of ``record_ids`` ``trainer`` consumed: recovery's membership test (P-SET-20).

        One indexed query per call, so a trainer asks per batch of pushed records instead of
        holding every consumed id of its history in memory.
        """
        if not record_ids:
            return frozenset()
        query = select(consumed_records.c.record_id).where(
            consumed_records.c.scenario == self.scenario,
            consumed_records.c.trainer == trainer,
            consumed_records.c.record_id.in_(list(dict.fromkeys(record_ids))),
        )
        with self._database.read() as connection:
            return frozenset(connection.execute(query).scalars())

    def submitted_among(self, trainer: str, data_ids: Sequence[str]) -> frozenset[str]:
        """Which of ``data_ids`` ``trainer`` committed: the pipeline names new job data with an
        id no commit used (a commit is idempotent per id). One query by primary key."""
        if not data_ids:
            return frozenset()
        query = select(submissions.c.data_id).where(
            submissions.c.scenario == self.scenario,
            submissions.c.trainer == trainer,
            submissions.c.data_id.in_(list(dict.fromkeys(data_ids))),
        )
        with self._database.read() as connection:
            return frozenset(connection.execute(query).scalars())

    def train_counts(self, trainer: str, sample_ids: Sequence[str]) -> dict[str, int]:
        """How many committed jobs of ``trainer`` trained each sample (0 when none)."""
        query = (
            select(samples.c.id, sample_trains.c["count"])
            .join(
                sample_trains,
                and_(
                    sample_trains.c.sample_seq == samples.c.seq, sample_trains.c.trainer == trainer
                ),
            )
            .where(samples.c.scenario == self.scenario, samples.c.id.in_(list(sample_ids)))
        )
        with self._database.read() as connection:
            counts = dict(connection.execute(query).all())
        return {sample_id: int(counts.get(sample_id, 0)) for sample_id in sample_ids}

    # -- committing a submission ----------------------------------------------------------

    def commit_submission(
        self,
        trainer: str,
        data_id: str,
        sample_ids: Sequence[str],
        instruction_id: str | None = None,
        *,
        released_record_ids: Iterable[str] = (),
        drops: Mapping[str, int] | None = None,
    ) -> bool:
        """Commit the submission of job data ``data_id``, in one transaction (P-PIPE-9).

        Adds one to ``trainer``'s train count of each listed sample, takes them out of its
        untrained samples and its manual buffer (P-MODE-7), consumes the instruction (its
        request id) and the released records (P-STALE-1), and adds ``drops`` (reason -> how
        many of the released records ended without training) to ``trainer``'s drop counts, so
        an ended record is counted exactly when its end becomes durable. Idempotent per
        ``data_id``.

        :returns: True when committed now; False when ``data_id`` was committed already.
        :raises UnknownSampleError: when a listed sample was never stored (nothing is written).
        """
        ids = list(dict.fromkeys(sample_ids))
        with self._database.write() as connection:
            done = connection.execute(
                select(submissions.c.data_id).where(
                    submissions.c.scenario == self.scenario,
                    submissions.c.trainer == trainer,
                    submissions.c.data_id == data_id,
                )
            ).first()
            if done is not None:
                return False
            found = self._positions(connection, ids)
            missing = tuple(i for i in ids if i not in found)
            if missing:
                raise UnknownSampleError(self.scenario, missing)
            connection.execute(
                submissions.insert().values(
                    scenario=self.scenario,
                    trainer=trainer,
                    data_id=data_id,
                    committed_at=time.time(),
                )
            )
            positions = list(found.values())
            seqs = [p.seq for p in positions]
            add_counts(
                connection,
                sample_trains,
                [{"sample_seq": seq, "trainer": trainer, "count": 1} for seq in seqs],
                key=("sample_seq", "trainer"),
                columns=("count",),
            )
            if positions:
                connection.execute(
                    delete(pending_samples).where(
                        pending_samples.c.scenario == self.scenario,
                        pending_samples.c.trainer == trainer,
                        tuple_(pending_samples.c.commit_tx, pending_samples.c.sample_seq).in_(
                            [(p.commit_tx, p.seq) for p in positions]
                        ),
                    )
                )
                connection.execute(
                    delete(manual_buffer).where(
                        manual_buffer.c.scenario == self.scenario,
                        manual_buffer.c.trainer == trainer,
                        manual_buffer.c.sample_seq.in_(seqs),
                    )
                )
            if instruction_id is not None:
                self._consume_instruction(connection, trainer, instruction_id)
            insert_or_ignore(
                connection,
                consumed_records,
                [
                    {"scenario": self.scenario, "trainer": trainer, "record_id": record_id}
                    for record_id in sorted(set(released_record_ids))
                ],
            )
            if drops:
                add_drops(connection, self.scenario, drops, trainer=trainer)
        return True

    def _positions(self, connection: Connection, ids: Sequence[str]) -> dict[str, Position]:
        if not ids:
            return {}
        query = select(samples.c.id, samples.c.commit_tx, samples.c.seq).where(
            samples.c.scenario == self.scenario, samples.c.id.in_(list(ids))
        )
        return {row.id: Position(row.commit_tx, row.seq) for row in connection.execute(query)}

    # -- the manual buffer ----------------------------------------------------------------

    def manual_buffer(self, trainer: str) -> list[StoredSample]:
        """``trainer``'s manual buffer: the samples a client chose, in store order (P-MODE-5)."""
        query = (
            select(samples)
            .join(manual_buffer, manual_buffer.c.sample_seq == samples.c.seq)
            .where(manual_buffer.c.scenario == self.scenario, manual_buffer.c.trainer == trainer)
            .order_by(samples.c.commit_tx, samples.c.seq)
        )
        with self._database.read() as connection:
            return [_stored(row) for row in connection.execute(query)]

    def insert_into_manual_buffer(self, trainer: str, sample_ids: Sequence[str]) -> None:
        """Add samples to ``trainer``'s manual buffer (those already in it stay once).

        :raises UnknownSampleError: when a sample is not stored (or was a removed upload).
        """
        with self._database.write() as connection:
            query = select(samples.c.id, samples.c.seq).where(
                samples.c.scenario == self.scenario,
                samples.c.id.in_(list(sample_ids)),
                samples.c.removed.is_(False),
            )
            seqs = dict(connection.execute(query).all())
            missing = tuple(i for i in sample_ids if i not in seqs)
            if missing:
                raise UnknownSampleError(self.scenario, missing)
            rows = [
                {"scenario": self.scenario, "trainer": trainer, "sample_seq": seq}
                for seq in seqs.values()
            ]
            insert_or_ignore(connection, manual_buffer, rows)

    def remove_from_manual_buffer(self, trainer: str, sample_ids: Sequence[str]) -> None:
        """Take samples out of ``trainer``'s manual buffer (absent ones are ignored)."""
        chosen = select(samples.c.seq).where(
            samples.c.scenario == self.scenario, samples.c.id.in_(list(sample_ids))
        )
        with self._database.write() as connection:
            connection.execute(
                delete(manual_buffer).where(
                    manual_buffer.c.scenario == self.scenario,
                    manual_buffer.c.trainer == trainer,
                    manual_buffer.c.sample_seq.in_(chosen),
                )
            )

    # -- training instructions ------------------------------------------------------------

    def enqueue_instruction(self, request_id: str, body: JSON) -> bool:
        """Queue a training instruction under the client's request id (P-MODE-10).

        :returns: True when queued now; False when the same instruction was queued already.
        :raises ConflictError: when the request id was queued with another body.
        """
        text = json_values.dump(body)
        with self._database.write() as connection:
            stored = connection.execute(
                select(instructions.c.body).where(
                    instructions.c.scenario == self.scenario,
                    instructions.c.request_id == request_id,
                )
            ).scalar_one_or_none()
            if stored is not None:
                if stored != text:
                    raise ConflictError("instruction", request_id, self.scenario)
                return False
            connection.execute(
                instructions.insert().values(
                    scenario=self.scenario, request_id=request_id, body=text
                )
            )
        return True

    def unread_instructions(self, trainer: str) -> list[Instruction]:
        """The instructions ``trainer`` has not consumed, oldest first (P-MODE-3)."""
        read = select(literal(1)).where(
            instruction_reads.c.scenario == self.scenario,
            instruction_reads.c.trainer == trainer,
            instruction_reads.c.request_id == instructions.c.request_id,
        )
        query = (
            select(instructions.c.request_id, instructions.c.body)
            .where(instructions.c.scenario == self.scenario, ~read.exists())
            .order_by(instructions.c.seq)
        )
        with self._database.read() as connection:
            return [
                Instruction(request_id, json_values.load(body))
                for request_id, body in connection.execute(query)
            ]

    def consume_instruction(self, trainer: str, request_id: str) -> None:
        """Mark an instruction consumed by ``trainer`` without a job (idempotent)."""
        with self._database.write() as connection:
            self._consume_instruction(connection, trainer, request_id)

    def _consume_instruction(self, connection: Connection, trainer: str, request_id: str) -> None:
        insert_or_ignore(
            connection,
            instruction_reads,
            [{"scenario": self.scenario, "trainer": trainer, "request_id": request_id}],
        )

    # -- job outcomes ---------------------------------------------------------------------

    def record_job_outcome(self, trainer: str, outcome: JSON) -> None:
        """Make ``trainer``'s last job outcome durable (before the trainer acts on it).

        Metrics that are not finite (a NaN loss) are kept as they are: the outcome read back
        is the outcome recorded.
        """
        row = {
            "scenario": self.scenario,
            "trainer": trainer,
            "body": json_values.dump_numbers(outcome),
            "ended_at": time.time(),
        }
        with self._database.write() as connection:
            insert_or_replace(connection, job_outcomes, row, key=("scenario", "trainer"))

    def last_job_outcome(self, trainer: str) -> JSON | None:
        """The last job outcome recorded for ``trainer``; ``None`` before its first job ends."""
        query = select(job_outcomes.c.body).where(
            job_outcomes.c.scenario == self.scenario, job_outcomes.c.trainer == trainer
        )
        with self._database.read() as connection:
            body = connection.execute(query).scalar_one_or_none()
        return None if body is None else dict(json_values.load(body))
