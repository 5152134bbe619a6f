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

Why this module is long: the record store and its write batch (:class:`RecordBatch`) share the
row format, the content hash, the eviction and the link restoring; the batch is the store's
write path, not a second store.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import attrs
from sqlalchemy import Connection, Row, bindparam, func, select, update

from reef.core.records import InferenceRecord, Record, Report, dumps, loads
from reef.core.trajectory_index import LinkEntry, TrajectoryIndex
from reef.storage.database import Database, HeldWriter
from reef.storage.drops import EVICTED, add_drops
from reef.storage.errors import ConflictError, MissingLinkError
from reef.storage.positions import Position, after_cursor, cursor_parameters, lock_store_order
from reef.storage.tables import record_usage, records
from reef.storage.upserts import add_counts_statement

__all__ = [
    "RecordBatch",
    "RecordCapacity",
    "RecordStore",
    "StoredId",
    "StoredLink",
    "StoredRecord",
]

_log = logging.getLogger(__name__)

#: The eviction reason of bodies evicted to keep a scenario within its capacity.
CAPACITY: Final = "capacity"

#: Ids looked up in one query by :meth:`RecordBatch.find`.
_FIND_CHUNK: Final = 500

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


def content_hash(record: Record, body: str | None = None) -> str:
    """The hash that decides whether two records under one id are the same record.

    :param body: ``dumps(record)`` when the caller has it already (it is what is hashed,
        except for a report, whose admission time is left out).
    """
    if isinstance(record, Report):
        content = record.content_key()
    else:
        content = dumps(record) if body is None else body
    return hashlib.sha256(content.encode()).hexdigest()


@attrs.frozen
class StoredId:
    """What the store holds under an id, without the body: what a write under the id is
    judged by.

    :ivar scenario: the scenario of the stored record (ids are unique across scenarios).
    :ivar kind: ``"inference"``, ``"report"`` or ``"judged"``.
    :ivar content_hash: :func:`content_hash` of the record.
    :ivar link: its trajectory link entry (an inference record), else ``None``.
    """

    scenario: str
    kind: str
    content_hash: str
    link: LinkEntry | None


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
        # Statements of the hot paths (each batch runs them), built once: SQLAlchemy then
        # skips most of its work.
        self._insert = (
            records.insert().values(commit_tx=0).returning(records.c.commit_tx, records.c.seq)
        )
        self._add_usage = add_counts_statement(
            database.dialect, record_usage, key=["scenario"], columns=["bodies", "body_bytes"]
        )
        self._find = select(
            records.c.id,
            records.c.scenario,
            records.c.kind,
            records.c.content_hash,
            records.c.parent_id,
            records.c.request_key,
            records.c.reply_keys,
        ).where(records.c.id.in_(bindparam("ids", expanding=True)))
        links = select(
            records.c.commit_tx,
            records.c.seq,
            records.c.id,
            records.c.parent_id,
            records.c.request_key,
            records.c.reply_keys,
        ).where(records.c.scenario == scenario, records.c.kind == "inference")
        position = (records.c.commit_tx, records.c.seq)
        self._links_after_query = after_cursor(database.dialect, links, *position)
        self._links_page_query = after_cursor(database.dialect, links, *position, limit=True)
        rows = select(records).where(records.c.scenario == scenario)
        self._read_after_query = after_cursor(database.dialect, rows, *position)
        self._read_page_query = after_cursor(database.dialect, rows, *position, limit=True)

    @property
    def database(self) -> Database:
        """The database the store is in."""
        return self._database

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
        if not items:
            return 0
        with self.batch() as batch:
            batch.find(record.id for record, _ in items)
            return sum(batch.add(record, link=link) for record, link in items)

    def append_calls(
        self, calls: Sequence[InferenceRecord], index: TrajectoryIndex, cursor: Position | None
    ) -> tuple[list[LinkEntry], Position | None]:
        """Link ``calls`` and store them, in one transaction, so that several writers of the
        scenario (processes with an index each) link as one writer would.

        Inside the transaction, after the scenario's writers are serialised, ``index`` first
        restores the link entries stored after ``cursor`` (what other writers committed), then
        links each call in order (:meth:`RecordBatch.add_call`). A call therefore never misses
        a parent committed before it, whichever process stored that parent.

        :param index: the caller's index, brought up to ``cursor`` by earlier calls; it is
            changed in place, and must be rebuilt when this raises.
        :returns: each call's link entry, and the cursor of the last link entry restored or
            stored.
        :raises ConflictError, MissingLinkError: as :meth:`append`; nothing is stored then.
        """
        with self.batch(index, cursor) as batch:
            batch.find(call.id for call in calls)
            entries = [batch.add_call(call) for call in calls]
        return entries, batch.cursor

    @contextlib.contextmanager
    def batch(
        self,
        index: TrajectoryIndex | None = None,
        cursor: Position | None = None,
        *,
        writer: HeldWriter | None = None,
    ) -> Iterator[RecordBatch]:
        """One write transaction of the scenario's records: a :class:`RecordBatch`.

        The scenario's writers are serialised first (:func:`lock_store_order`); with an
        ``index``, it then restores the link entries stored after ``cursor``. The records the
        block adds are inserted when it ends and committed together (one durable commit for
        them all); if the block raises, nothing is stored.

        :param index: the writer's trajectory index, brought up to ``cursor``; it is changed in
            place, and must be rebuilt when the block or the commit raises.
        :param writer: a connection held by the calling thread for its batches (instead of one
            from the pool). When nobody else committed since the writer's previous batch, the
            catch-up is skipped: the index is up to date as long as it is the one that batch
            left (the caller rebuilds it, and may not pass a stale one, after a failure).
        """
        with (writer or self._database).write() as connection:
            lock_store_order(connection, "records", self.scenario)
            catch_up = index is not None and (writer is None or writer.others_committed())
            batch = RecordBatch(self, connection, index, cursor, catch_up=catch_up)
            yield batch
            evicted = batch._write()
        self._warn_evicted(evicted)

    def _warn_evicted(self, evicted: int) -> None:
        if evicted:
            _log.warning(
                "scenario %r: evicted the %d oldest record bodies to stay within %s",
                self.scenario,
                evicted,
                self.capacity,
            )

    def _check_scenario(self, record: Record) -> None:
        if record.scenario != self.scenario:
            raise ValueError(
                f"record {record.id!r} is of scenario {record.scenario!r}, "
                f"not of this store's {self.scenario!r}"
            )

    def _row(self, record: Record, link: LinkEntry | None) -> dict[str, Any]:
        self._check_scenario(record)
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
            "content_hash": content_hash(record, body),
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
                # evicted_reason (NULL in every row) too: PostgreSQL follows the index's
                # order then, instead of sorting every held body.
                .order_by(records.c.evicted_reason, records.c.seq)
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
        query = self._read_after_query if limit is None else self._read_page_query
        parameters = {**cursor_parameters(cursor), "limit": limit}
        with self._database.read() as connection:
            return [_stored(row) for row in connection.execute(query, parameters)]

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
        parameters = {**cursor_parameters(cursor), "limit": limit}
        query = self._links_after_query if limit is None else self._links_page_query
        links = []
        for row in connection.execute(query, parameters):
            link = _link(row)
            assert link is not None  # an inference record is always stored with its entry
            links.append(StoredLink(Position(row.commit_tx, row.seq), link))
        return links

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


class RecordBatch:
    """The records written in one transaction of :meth:`RecordStore.batch`.

    A writer looks up the ids it will judge with :meth:`find` (one query for many ids), then
    adds records one at a time. Each one is judged against what is stored and what the batch
    took before it, and is either refused (an exception; the batch is unchanged) or taken, so
    a refused record does not spoil its neighbours. The rows taken are inserted when the
    batch's block ends, and committed together.

    :ivar cursor: the position of the last link entry restored or stored (a cursor for
        :meth:`RecordStore.read_links_after`); final once the block has ended.
    """

    def __init__(
        self,
        store: RecordStore,
        connection: Connection,
        index: TrajectoryIndex | None,
        cursor: Position | None,
        *,
        catch_up: bool = True,
    ) -> None:
        self._store = store
        self._connection = connection
        self._index = index
        self.cursor = cursor
        # What is known about each id looked up or taken: None when nothing is stored.
        self._known: dict[str, StoredId | None] = {}
        self._rows: list[dict[str, Any]] = []
        if index is not None and catch_up:
            self.cursor = restore_links(index, store._links_after(connection, cursor, None), cursor)

    def find(self, ids: Iterable[str]) -> dict[str, StoredId]:
        """What is stored under ``ids``, in any scenario, or taken by this batch; an id that
        is free is not in the answer. Queries only the ids not looked up before."""
        wanted = list(dict.fromkeys(ids))
        unknown = [record_id for record_id in wanted if record_id not in self._known]
        for start in range(0, len(unknown), _FIND_CHUNK):
            chunk = unknown[start : start + _FIND_CHUNK]
            self._known.update(dict.fromkeys(chunk))
            for row in self._connection.execute(self._store._find, {"ids": chunk}):
                self._known[row.id] = StoredId(row.scenario, row.kind, row.content_hash, _link(row))
        return {
            record_id: found
            for record_id in wanted
            if (found := self._known[record_id]) is not None
        }

    def stored(self, record_id: str) -> StoredId | None:
        """What is stored under ``record_id`` or taken by this batch, or ``None``."""
        return self.find([record_id]).get(record_id)

    def add(self, record: Record, *, link: LinkEntry | None = None) -> bool:
        """Take ``record`` (with ``link``, the entry an inference call was linked with).

        :returns: True when taken; False when it is stored or taken already with the same
            content (nothing to write).
        :raises ConflictError: when the id is stored or taken with different content, or in
            another scenario; the batch is unchanged.
        :raises MissingLinkError, ValueError: as :meth:`RecordStore.append`; the batch is
            unchanged.
        """
        row = self._store._row(record, link)
        if self._already(record.id, row["content_hash"]) is not None:
            return False
        self._take(row, link)
        return True

    def add_call(self, call: InferenceRecord) -> LinkEntry:
        """Link ``call`` with the batch's index and take it.

        A call stored or taken already with the same content is not linked again: its stored
        entry is the answer.

        :raises ConflictError: as :meth:`add`; the batch and the index are unchanged.
        :raises ValueError: when the call is of another scenario, or the batch was opened
            without an index.
        """
        if self._index is None:
            raise ValueError("this batch was opened without a trajectory index to link calls")
        if self.stored(call.id) is not None:
            stored = self._already(call.id, content_hash(call))
            if stored is not None and stored.link is not None:
                return stored.link
        self._store._check_scenario(call)
        entry = self._index.add(call)
        self._take(self._store._row(call, entry), entry)
        return entry

    def _already(self, record_id: str, digest: str) -> StoredId | None:
        """The stored or taken record under ``record_id`` when it has this content; ``None``
        when the id is free; :class:`ConflictError` otherwise."""
        stored = self.stored(record_id)
        if stored is None:
            return None
        if stored.scenario != self._store.scenario or stored.content_hash != digest:
            raise ConflictError("record", record_id, stored.scenario)
        return stored

    def _take(self, row: dict[str, Any], link: LinkEntry | None) -> None:
        self._rows.append(row)
        self._known[row["id"]] = StoredId(row["scenario"], row["kind"], row["content_hash"], link)

    def _write(self) -> int:
        """Insert the rows taken and evict beyond the capacity; how many bodies went."""
        if not self._rows:
            return 0
        store = self._store
        inserted = self._connection.execute(store._insert, self._rows).all()
        self._connection.execute(
            store._add_usage,
            {
                "scenario": store.scenario,
                "bodies": len(self._rows),
                "body_bytes": sum(row["body_bytes"] for row in self._rows),
            },
        )
        # Under the store-order lock nothing was stored between the catch-up and these rows.
        positions = [Position(row.commit_tx, row.seq) for row in inserted]
        if self.cursor is not None:
            positions.append(self.cursor)
        self.cursor = max(positions)
        return store._evict(self._connection, store.capacity) if store.capacity is not None else 0


def restore_links(
    index: TrajectoryIndex, links: Iterable[StoredLink], cursor: Position | None
) -> Position | None:
    """Restore into ``index`` the entries of ``links`` (in store order) it does not hold yet;
    returns the cursor after the last of them (``cursor`` when there are none)."""
    for link in links:
        cursor = link.position
        if link.entry.call_id not in index:
            index.restore(link.entry)
    return cursor


def _link(row: Any) -> LinkEntry | None:
    """The link entry in the link columns of ``row`` (any query result holding them), if
    it has one."""
    if row.request_key is None:
        return None
    return LinkEntry(row.id, row.parent_id, row.request_key, tuple(json.loads(row.reply_keys)))


def _stored(row: Row[Any]) -> StoredRecord:
    return StoredRecord(
        position=Position(row.commit_tx, row.seq),
        id=row.id,
        kind=row.kind,
        record=None if row.body is None else loads(row.body),
        link=_link(row),
        evicted_reason=row.evicted_reason,
    )
