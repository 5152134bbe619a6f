"""A scenario's sample rows: storing samples, and which ones each trainer has not trained.

The base of the sample store's parts (:class:`SampleRows`): the rows of ``reef_samples`` and the
trainers that read them, with their untrained samples (``reef_pending_samples``). A unit's
samples are stored with the ids of the records they consume, in one transaction, so a crash
leaves all of them or none; named samples (the pipeline's ``made_samples``) have no group and
no consumed record. The other parts (uploads, consumption, the manual buffer, instructions, job
outcomes) build on it; :class:`~reef.storage.samples.TrainerSamples` joins them.

A trainer's untrained samples live in a table of their own, so reading them costs the same with
a million trained samples as with none. Store order is the order of
:class:`~reef.storage.positions.Position`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypeAlias

import attrs
from sqlalchemy import Connection, Row, bindparam, delete, literal, select

from reef.storage import json_values
from reef.storage.database import Database
from reef.storage.driver import driver_cursor, driver_sql
from reef.storage.errors import ConflictError, UnknownTrainerError
from reef.storage.positions import Position, after_cursor, cursor_parameters, lock_store_order
from reef.storage.tables import (
    consumed_records,
    pending_samples,
    sample_trains,
    samples,
    scenarios,
    trainers,
)
from reef.storage.upserts import insert_or_ignore, insert_or_replace, insert_selected_or_ignore

__all__ = ["JSON", "NewSample", "SampleKind", "SampleOrigin", "SampleRows", "StoredSample"]

SampleKind: TypeAlias = Literal["trajectory", "task"]
SampleOrigin: TypeAlias = Literal["record", "named", "upload"]
JSON: TypeAlias = dict[str, Any]

_KINDS: frozenset[str] = frozenset(("trajectory", "task"))

# The hot path's inserts, in SQL that SQLite and PostgreSQL run alike (see reef.storage.driver).
# A sample's columns, in the order of its parameters; commit_tx is 0 (reef.storage.positions).
_SAMPLE_COLUMNS = ("scenario", "id", "kind", "body", "group_id", "trainer", "origin", "removed")
_SAMPLE_VALUES = f"(0, {', '.join('?' * len(_SAMPLE_COLUMNS))})"
_INSERT_SAMPLES = (
    f"INSERT INTO {samples.name} (commit_tx, {', '.join(_SAMPLE_COLUMNS)}) VALUES {{values}}"
    " ON CONFLICT DO NOTHING RETURNING commit_tx, seq"
)
_ROWS_PER_INSERT = 500
_INSERT_PENDING = (
    f"INSERT INTO {pending_samples.name} (scenario, trainer, commit_tx, sample_seq)"
    " VALUES (?, ?, ?, ?)"
)
_INSERT_CONSUMED = (
    f"INSERT INTO {consumed_records.name} (scenario, trainer, record_id) VALUES (?, ?, ?)"
    " ON CONFLICT DO NOTHING"
)


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


def stored_sample(row: Row[Any]) -> StoredSample:
    return StoredSample(
        position=Position(row.commit_tx, row.seq),
        id=row.id,
        kind=row.kind,
        body=json_values.load(row.body),
        group_id=row.group_id,
        trainer=row.trainer,
        origin=row.origin,
    )


class SampleRows:
    """The sample rows of one scenario and the trainers that read them (see the module).

    Every public method is one transaction. Methods that take a ``trainer`` act for that
    trainer only.
    """

    def __init__(self, database: Database, scenario: str) -> None:
        self._database = database
        self.scenario = scenario
        self._registered: set[str] = set()
        # The inserts of the hot paths, sent straight to the driver (see reef.storage.driver).
        self._insert_consumed = driver_sql(database.dialect, _INSERT_CONSUMED)
        self._insert_pending_rows = driver_sql(database.dialect, _INSERT_PENDING)
        self._sample_values = driver_sql(database.dialect, _SAMPLE_VALUES)
        # The position as the pending row's key holds it, named for the merge's order.
        position = (pending_samples.c.commit_tx, pending_samples.c.sample_seq)
        untrained = (
            select(samples, position[0].label("pending_tx"), position[1].label("pending_seq"))
            .join(pending_samples, pending_samples.c.sample_seq == samples.c.seq)
            .where(
                pending_samples.c.scenario == scenario,
                pending_samples.c.trainer == bindparam("reader"),
            )
        )
        order = ("pending_tx", "pending_seq")
        self._untrained_query = after_cursor(database.dialect, untrained, *position, order=order)
        self._untrained_page_query = after_cursor(
            database.dialect, untrained, *position, order=order, limit=True
        )

    @property
    def database(self) -> Database:
        """The database the store lives in (for the scenario's other stores, e.g. drop counts)."""
        return self._database

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
            with driver_cursor(connection) as cursor:
                inserted = self._insert_rows(cursor, rows)
                if len(inserted) == len(rows):
                    self._insert_pending(cursor, inserted, [trainer])
                    if record_ids:
                        cursor.executemany(
                            self._insert_consumed,
                            [(self.scenario, trainer, record_id) for record_id in record_ids],
                        )
                    return True
            stored = self._stored_rows(connection, [row["id"] for row in rows])
            if inserted:
                new = {position.seq for position in inserted}
                taken = next(row.id for row in stored if row.seq not in new)
                raise ConflictError("sample", taken, self.scenario)
            self._check_same(rows, stored)
            return False

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
    ) -> list[Position]:
        if not rows:
            return []
        lock_store_order(connection, "samples", self.scenario)
        with driver_cursor(connection) as cursor:
            positions = self._insert_rows(cursor, rows)
            self._insert_pending(cursor, positions, pending_for)
        return positions

    def _insert_rows(self, cursor: Any, rows: list[dict[str, Any]]) -> list[Position]:
        # Insert the sample rows that are not stored yet, a few hundred to a statement (within
        # SQLite's limit of parameters); returns the positions of those inserted now.
        positions = []
        for start in range(0, len(rows), _ROWS_PER_INSERT):
            chunk = rows[start : start + _ROWS_PER_INSERT]
            values = ", ".join([self._sample_values] * len(chunk))
            cursor.execute(
                _INSERT_SAMPLES.format(values=values),
                [row[name] for row in chunk for name in _SAMPLE_COLUMNS],
            )
            positions += [Position(commit_tx, seq) for commit_tx, seq in cursor.fetchall()]
        return positions

    def _insert_pending(
        self, cursor: Any, positions: Sequence[Position], trainers_: list[str]
    ) -> None:
        pending = [
            (self.scenario, trainer, position.commit_tx, position.seq)
            for trainer in trainers_
            for position in positions
        ]
        if pending:
            cursor.executemany(self._insert_pending_rows, pending)

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
        query = self._untrained_query if limit is None else self._untrained_page_query
        parameters = {**cursor_parameters(after_position), "reader": trainer, "limit": limit}
        with self._database.read() as connection:
            self._check_registered(connection, trainer)
            return [stored_sample(row) for row in connection.execute(query, parameters)]

    def get(self, sample_ids: Sequence[str]) -> list[StoredSample]:
        """The stored samples with these ids (removed uploads excluded), in store order."""
        query = select(samples).where(
            samples.c.scenario == self.scenario,
            samples.c.id.in_(list(sample_ids)),
            samples.c.removed.is_(False),
        )
        with self._database.read() as connection:
            found = [stored_sample(row) for row in connection.execute(query)]
        # Sorted here, not by the database: asked to sort, SQLite walks the scenario's samples
        # in store order to find a few ids instead of looking each up by its id.
        found.sort(key=lambda stored: (stored.position.commit_tx, stored.position.seq))
        return found

    def _positions(self, connection: Connection, ids: Sequence[str]) -> dict[str, Position]:
        if not ids:
            return {}
        query = select(samples.c.id, samples.c.commit_tx, samples.c.seq).where(
            samples.c.scenario == self.scenario, samples.c.id.in_(list(ids))
        )
        return {row.id: Position(row.commit_tx, row.seq) for row in connection.execute(query)}
