"""The record store: a scenario's inference records, reports and judged records.

Append-only and addressed by id. Each record gets a place in store order (a
:class:`~reef.storage.positions.Position`) and the trainer follows the store with
:meth:`RecordStore.read_after`, which never steps past a gap that a running transaction may still
fill (see :mod:`reef.storage.positions`).

Idempotent by id: appending a record that is stored already with the same content changes
nothing; different content under the same id raises :class:`~reef.storage.errors.ConflictError`.
A report's content excludes its admission time (:meth:`reef.core.records.Report.content_key`),
so a client's retry of the same report is the same report.

Each inference record is stored with its trajectory link entry
(:class:`reef.core.trajectory_index.LinkEntry`), so :meth:`RecordStore.trajectory_index`
rebuilds the links after a restart without reading, or even having, the bodies.

Under a capacity bound (:class:`RecordCapacity`) the store evicts the oldest bodies of the
scenario: the row, its position and its link entry stay, the body goes, a warning is logged and
the count of evicted bodies grows durably, in the same transaction.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Sequence
from typing import Any, Final

import attrs
from sqlalchemy import Connection, Row, func, select, update

from reef.core.records import InferenceRecord, Record, Report, dumps, loads
from reef.core.trajectory_index import LinkEntry, TrajectoryIndex
from reef.storage.database import Database
from reef.storage.drops import EVICTED, add_drops
from reef.storage.errors import ConflictError, MissingLinkError
from reef.storage.positions import Position, after, lock_store_order
from reef.storage.tables import record_usage, records
from reef.storage.upserts import add_counts

__all__ = ["RecordCapacity", "RecordStore", "StoredLink", "StoredRecord"]

_log = logging.getLogger(__name__)

#: The eviction reason of bodies evicted to keep a scenario within its capacity.
CAPACITY: Final = "capacity"

#: Rows fetched at a time while choosing the bodies to evict.
_EVICTION_BATCH: Final = 500


def _positive_or_none(_: object, attribute: attrs.Attribute[Any], value: int | None) -> None:
    if value is not None and value <= 0:
        raise ValueError(f"{attribute.name} must be a positive int or None, got {value!r}")


@attrs.frozen
class RecordCapacity:
    """How many record bodies a scenario keeps: beyond either bound the oldest are evicted.

    :ivar max_bodies: the most bodies held; ``None`` for no bound.
    :ivar max_bytes: the most bytes of bodies (their canonical JSON, UTF-8); ``None`` for none.
    """

    max_bodies: int | None = attrs.field(default=None, validator=_positive_or_none)
    max_bytes: int | None = attrs.field(default=None, validator=_positive_or_none)


@attrs.frozen
class StoredRecord:
    """A record as the store holds it.

    :ivar position: its place in store order (a cursor for :meth:`RecordStore.read_after`).
    :ivar id: the record's id.
    :ivar kind: ``"inference"``, ``"report"`` or ``"judged"``.
    :ivar record: the record; ``None`` once its body was evicted.
    :ivar link: the trajectory link entry of an inference record, else ``None``.
    :ivar evicted_reason: why the body is gone (``"capacity"``), or ``None`` while it is held.
    """

    position: Position
    id: str
    kind: str
    record: Record | None
    link: LinkEntry | None
    evicted_reason: str | None


@attrs.frozen
class StoredLink:
    """The link entry of a stored inference record, without its body.

    :ivar position: the record's place in store order (a cursor for
        :meth:`RecordStore.read_links_after`).
    :ivar entry: its trajectory link entry.
    """

    position: Position
    entry: LinkEntry


def content_hash(record: Record) -> str:
    """The hash that decides whether two records under one id are the same record."""
    content = record.content_key() if isinstance(record, Report) else dumps(record)
    return hashlib.sha256(content.encode()).hexdigest()


class RecordStore:
    """The record store of one scenario.

    :param database: the opened database.
    :param scenario: the scenario whose records this store holds.
    :param capacity: the bound on held bodies; ``None`` keeps every body.
    """

    def __init__(
        self, database: Database, scenario: str, *, capacity: RecordCapacity | None = None
    ) -> None:
        self._database = database
        self.scenario = scenario
        self.capacity = capacity
        self._insert = (
            records.insert().values(commit_tx=0).returning(records.c.commit_tx, records.c.seq)
        )

    # -- writing --------------------------------------------------------------------------

    def append(self, record: Record, *, link: LinkEntry | None = None) -> bool:
        """Store ``record`` (with ``link``, the entry its inference call was linked with).

        :returns: True when stored now, False when it was stored already (nothing changed).
        :raises ConflictError: when the id is stored with different content (or in another
            scenario).
        :raises MissingLinkError: when an inference record comes without its link entry, or
            another record with one.
        """
        return self.append_many([(record, link)]) == 1

    def append_many(self, items: Sequence[tuple[Record, LinkEntry | None]]) -> int:
        """Store several records in one transaction, in the given order.

        :returns: how many were stored now (the others were stored already).
        :raises ConflictError, MissingLinkError: as :meth:`append`; nothing is stored then.
        """
        rows: dict[str, dict[str, Any]] = {}
        for record, link in items:
            row = self._row(record, link)
            earlier = rows.get(record.id)
            if earlier is not None and earlier["content_hash"] != row["content_hash"]:
                raise ConflictError("record", record.id, self.scenario)
            rows.setdefault(record.id, row)
        if not rows:
            return 0
        with self._database.write() as connection:
            lock_store_order(connection, "records", self.scenario)
            positions, evicted = self._write_rows(connection, rows)
        self._warn_evicted(evicted)
        return len(positions)

    def append_calls(
        self, calls: Sequence[InferenceRecord], index: TrajectoryIndex, cursor: Position | None
    ) -> tuple[list[LinkEntry], Position | None]:
        """Link ``calls`` and store them, in one transaction, so that several writers of the
        scenario (processes with an index each) link as one writer would.

        Inside the transaction, after the scenario's writers are serialised, ``index`` first
        restores the link entries stored after ``cursor`` (what other writers committed), then
        links each call in order (:meth:`TrajectoryIndex.add`). A call therefore never misses
        a parent committed before it, whichever process stored that parent.

        :param index: the caller's index, brought up to ``cursor`` by earlier calls; it is
            changed in place, and must be rebuilt when this raises.
        :returns: each call's link entry, and the cursor of the last link entry restored or
            stored.
        :raises ConflictError, MissingLinkError: as :meth:`append`; nothing is stored then.
        """
        with self._database.write() as connection:
            lock_store_order(connection, "records", self.scenario)
            for link in self._links_after(connection, cursor, None):
                cursor = link.position
                if link.entry.call_id not in index:
                    index.restore(link.entry)
            entries = [index.add(call) for call in calls]
            rows: dict[str, dict[str, Any]] = {}
            for call, entry in zip(calls, entries, strict=True):
                rows.setdefault(call.id, self._row(call, entry))
            positions, evicted = self._write_rows(connection, rows)
        self._warn_evicted(evicted)
        # Under the lock nothing was stored between the catch-up and these rows.
        return entries, max(positions, default=cursor)

    def _write_rows(
        self, connection: Connection, rows: dict[str, dict[str, Any]]
    ) -> tuple[list[Position], int]:
        """Insert the rows not stored yet (after the conflict check); evict beyond the
        capacity. The caller holds the store-order lock. Returns the new rows' positions and
        how many bodies were evicted."""
        stored = connection.execute(
            select(records.c.id, records.c.scenario, records.c.content_hash).where(
                records.c.id.in_(list(rows))
            )
        )
        rows = dict(rows)
        for record_id, scenario, digest in stored:
            if scenario != self.scenario or digest != rows[record_id]["content_hash"]:
                raise ConflictError("record", record_id, scenario)
            del rows[record_id]
        if not rows:
            return [], 0
        new = list(rows.values())
        inserted = connection.execute(self._insert, new).all()
        add_counts(
            connection,
            record_usage,
            [
                {
                    "scenario": self.scenario,
                    "bodies": len(new),
                    "body_bytes": sum(row["body_bytes"] for row in new),
                }
            ],
            key=("scenario",),
            columns=("bodies", "body_bytes"),
        )
        evicted = self._evict(connection, self.capacity) if self.capacity is not None else 0
        return [Position(row.commit_tx, row.seq) for row in inserted], evicted

    def _warn_evicted(self, evicted: int) -> None:
        if evicted:
            _log.warning(
                "scenario %r: evicted the %d oldest record bodies to stay within %s",
                self.scenario,
                evicted,
                self.capacity,
            )

    def _row(self, record: Record, link: LinkEntry | None) -> dict[str, Any]:
        if record.scenario != self.scenario:
            raise ValueError(
                f"record {record.id!r} is of scenario {record.scenario!r}, "
                f"not of this store's {self.scenario!r}"
            )
        if record.kind == "inference":
            if link is None or link.call_id != record.id:
                raise MissingLinkError(
                    f"inference record {record.id!r} must be stored with its own link entry"
                )
        elif link is not None:
            raise MissingLinkError(f"a {record.kind} record ({record.id!r}) has no link entry")
        body = dumps(record)
        return {
            "scenario": self.scenario,
            "id": record.id,
            "kind": record.kind,
            "body": body,
            "body_bytes": len(body.encode()),
            "content_hash": content_hash(record),
            "stored_at": time.time(),
            "evicted_reason": None,
            "parent_id": link.parent_id if link else None,
            "request_key": link.request_key if link else None,
            "reply_keys": json.dumps(list(link.reply_keys)) if link else None,
        }

    def _evict(self, connection: Connection, capacity: RecordCapacity) -> int:
        """Evict the oldest bodies until the scenario is within ``capacity``; how many went."""
        # The usage row was just updated in this transaction, so on PostgreSQL it is locked:
        # concurrent appenders of the scenario evict one after the other, never the same rows.
        bodies, size = connection.execute(
            select(record_usage.c.bodies, record_usage.c.body_bytes).where(
                record_usage.c.scenario == self.scenario
            )
        ).one()
        excess_bodies = bodies - capacity.max_bodies if capacity.max_bodies is not None else 0
        excess_bytes = size - capacity.max_bytes if capacity.max_bytes is not None else 0
        chosen: list[int] = []
        freed = 0
        last_seq = -1
        while len(chosen) < excess_bodies or freed < excess_bytes:
            batch = connection.execute(
                select(records.c.seq, records.c.body_bytes)
                .where(
                    records.c.scenario == self.scenario,
                    records.c.evicted_reason.is_(None),
                    records.c.seq > last_seq,
                )
                .order_by(records.c.seq)
                .limit(_EVICTION_BATCH)
            ).all()
            if not batch:
                break
            for seq, body_bytes in batch:
                if len(chosen) >= excess_bodies and freed >= excess_bytes:
                    break
                chosen.append(seq)
                freed += body_bytes
            last_seq = batch[-1].seq
        if not chosen:
            return 0
        connection.execute(
            update(records)
            .where(records.c.seq.in_(chosen))
            .values(body=None, evicted_reason=CAPACITY)
        )
        connection.execute(
            update(record_usage)
            .where(record_usage.c.scenario == self.scenario)
            .values(
                bodies=record_usage.c.bodies - len(chosen),
                body_bytes=record_usage.c.body_bytes - freed,
            )
        )
        add_drops(connection, self.scenario, {EVICTED: len(chosen)}, trainer=None)
        return len(chosen)

    # -- reading --------------------------------------------------------------------------

    def read_after(self, cursor: Position | None, limit: int | None = None) -> list[StoredRecord]:
        """The records stored after ``cursor`` (from the start when ``None``), in store order.

        Writers commit in store order (:mod:`reef.storage.positions`), so a reader that passes
        the last position it got as the next cursor sees every record exactly once.

        :param limit: the most records to return; ``None`` for all.
        """
        query = (
            select(records)
            .where(records.c.scenario == self.scenario)
            .order_by(records.c.commit_tx, records.c.seq)
            .limit(limit)
        )
        with self._database.read() as connection:
            query = query.where(after(records.c.commit_tx, records.c.seq, cursor))
            return [_stored(row) for row in connection.execute(query)]

    def get(self, record_id: str) -> StoredRecord | None:
        """The record stored under ``record_id`` in this scenario, or ``None``."""
        query = select(records).where(
            records.c.id == record_id, records.c.scenario == self.scenario
        )
        with self._database.read() as connection:
            row = connection.execute(query).one_or_none()
        return None if row is None else _stored(row)

    def read_links_after(
        self, cursor: Position | None, limit: int | None = None
    ) -> list[StoredLink]:
        """The link entries of the inference records stored after ``cursor``, in store order,
        without reading any body (they are complete after evictions).

        :param limit: the most entries to return; ``None`` for all.
        """
        with self._database.read() as connection:
            return self._links_after(connection, cursor, limit)

    def _links_after(
        self, connection: Connection, cursor: Position | None, limit: int | None
    ) -> list[StoredLink]:
        query = (
            select(
                records.c.commit_tx,
                records.c.seq,
                records.c.id,
                records.c.parent_id,
                records.c.request_key,
                records.c.reply_keys,
            )
            .where(
                records.c.scenario == self.scenario,
                records.c.kind == "inference",
                after(records.c.commit_tx, records.c.seq, cursor),
            )
            .order_by(records.c.commit_tx, records.c.seq)
            .limit(limit)
        )
        return [
            StoredLink(
                Position(row.commit_tx, row.seq),
                LinkEntry(
                    row.id, row.parent_id, row.request_key, tuple(json.loads(row.reply_keys))
                ),
            )
            for row in connection.execute(query)
        ]

    def trajectory_index(self) -> TrajectoryIndex:
        """A trajectory index of every stored inference call, rebuilt from the link entries.

        Reads no body, so it is complete after evictions. Entries are restored in store order.
        """
        index = TrajectoryIndex()
        for link in self.read_links_after(None):
            index.restore(link.entry)
        return index

    def evictions(self) -> dict[str, int]:
        """How many bodies of the scenario were evicted, by reason (durable: the rows stay)."""
        query = (
            select(records.c.evicted_reason, func.count())
            .where(records.c.scenario == self.scenario, records.c.evicted_reason.is_not(None))
            .group_by(records.c.evicted_reason)
        )
        with self._database.read() as connection:
            return {reason: int(count) for reason, count in connection.execute(query)}

    def usage(self) -> tuple[int, int]:
        """The bodies the scenario holds now: ``(count, bytes)``."""
        query = select(record_usage.c.bodies, record_usage.c.body_bytes).where(
            record_usage.c.scenario == self.scenario
        )
        with self._database.read() as connection:
            row = connection.execute(query).one_or_none()
        return (0, 0) if row is None else (int(row.bodies), int(row.body_bytes))


def _stored(row: Row[Any]) -> StoredRecord:
    link = None
    if row.request_key is not None:
        link = LinkEntry(row.id, row.parent_id, row.request_key, tuple(json.loads(row.reply_keys)))
    return StoredRecord(
        position=Position(row.commit_tx, row.seq),
        id=row.id,
        kind=row.kind,
        record=None if row.body is None else loads(row.body),
        link=link,
        evicted_reason=row.evicted_reason,
    )
