"""A scenario's ledger: the one writer of its records in this process, with its trajectory index.

Every record the service admits for a scenario (an inference record, a report) goes through the
scenario's :class:`ScenarioLedger`, which runs on a thread of its own:

- it keeps the scenario's :class:`~reef.core.trajectory_index.TrajectoryIndex`, rebuilt from the
  store's link entries (no bodies) when the ledger starts;
- what waits in its queue together (inference records and reports, up to :data:`MAX_BATCH`) is
  written in **one transaction** (group commit: one durable commit answers them all), in
  arrival order, through a :class:`~reef.storage.records.RecordBatch`. Inside that
  transaction, under the scenario's write lock, the index first restores the link entries
  other processes of the deployment stored since, so several processes on one store link
  exactly as one writer would; then one query looks up every id the batch names;
- each item is judged before anything is written and, when refused, takes nothing: its
  neighbours are committed and answered as if it had not been there. An inference record is
  linked with the index as it stands (after the calls before it). A report is admitted
  against the store and the calls before it in the batch: each reference must be a stored
  inference record of the scenario that no call continues (P-REP-1, P-REP-2);
- every item is answered only after its batch commits. When the transaction itself fails
  (the database, or a write conflict no check foresaw, such as another process taking an id),
  the index drops what the batch added to it (:meth:`TrajectoryIndex.tentative`: no rebuild,
  no read of the store) and the items are written again one transaction each, so a failure
  reaches only the item that causes it. An item the database itself cannot take (a full
  disk) is told to ``on_store_failure`` with the size of its record, so the store's health is
  decided by that write (:mod:`reef.server.store_health`).

Answers go back to the asyncio loop through :class:`concurrent.futures.Future` values, which
the routes await with :func:`asyncio.wrap_future`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Final

import attrs
from sqlalchemy.exc import DBAPIError, OperationalError

from reef.core.records import InferenceRecord, Report, dumps
from reef.core.trajectory_index import LinkEntry, TrajectoryIndex
from reef.server.bodies import ReportReceipt
from reef.server.errors import ApiError, ReportRejected
from reef.storage import ConflictError, Position, RecordStore, StorageError
from reef.storage.records import RecordBatch, content_hash, restore_links

__all__ = ["ScenarioLedger"]

_log = logging.getLogger(__name__)

#: The most items (inference records, reports) written in one transaction.
MAX_BATCH: Final = 256
#: Rows read at a time while the index catches up with the store.
_PAGE: Final = 2000


@attrs.frozen
class _Append:
    record: InferenceRecord
    done: Future[LinkEntry]


@attrs.frozen
class _Admit:
    report: Report
    done: Future[tuple[ReportReceipt, bool]]


class _Stop:
    pass


_Item = _Append | _Admit | _Stop


class ScenarioLedger:
    """The writer of one scenario's records; see the module docstring.

    :param store: the scenario's record store.
    :param other_stores: the record stores of the deployment's other scenarios, to tell a
        foreign reference from a missing one.
    :param on_store_failure: told of each item the database itself could not take, with the
        size of its record in bytes.
    :param on_write: told of each transaction: its seconds, and how many of its items the
        store could not take (the service's metrics).
    """

    def __init__(
        self,
        store: RecordStore,
        other_stores: Sequence[RecordStore],
        *,
        on_store_failure: Callable[[BaseException, int], None] | None = None,
        on_write: Callable[[float, int], None] | None = None,
    ) -> None:
        self.store = store
        self.scenario = store.scenario
        self._other_stores = other_stores
        self._on_store_failure = on_store_failure
        self._on_write = on_write
        self._index = TrajectoryIndex()
        self._cursor: Position | None = None
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        # The ledger thread's own connection: no pool round trip per batch, and on SQLite the
        # catch-up is skipped when no other connection committed since the last batch.
        self._writer = store.database.held_writer()
        self._catch_up()
        self._thread = threading.Thread(
            target=self._run, name=f"reef-ledger-{self.scenario}", daemon=True
        )
        self._thread.start()

    # -- the caller's side ------------------------------------------------------------------

    def append(self, record: InferenceRecord) -> Future[LinkEntry]:
        """Link and store ``record``; the future ends once it is durable."""
        done: Future[LinkEntry] = Future()
        self._queue.put(_Append(record, done))
        return done

    def admit(self, report: Report) -> Future[tuple[ReportReceipt, bool]]:
        """Check and store ``report``; the future gives its receipt and whether it is new, or
        raises :class:`ReportRejected` / :class:`ApiError` (409) having stored nothing."""
        done: Future[tuple[ReportReceipt, bool]] = Future()
        self._queue.put(_Admit(report, done))
        return done

    def trajectory_of(self, call_id: str) -> str | None:
        """The id of the first call of ``call_id``'s trajectory, as the index knows it now
        (``None`` when it does not: it is being rebuilt). Cost: O(depth); read on the
        caller's thread while the ledger's links more calls, which never changes a link."""
        index = self._index
        try:
            return index.trajectory(call_id)[0]
        except KeyError:
            return None

    def close(self) -> None:
        """Finish what is queued, then stop the thread."""
        self._queue.put(_Stop())
        self._thread.join()

    # -- the ledger thread ------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            work = [item for item in batch if not isinstance(item, _Stop)]
            if work:
                self._commit(work)
            if len(work) < len(batch):
                self._writer.close()
                return

    def _catch_up(self) -> None:
        """Restore the link entries other writers stored since the last read (store order);
        reads no body."""
        while True:
            links = self.store.read_links_after(self._cursor, _PAGE)
            self._cursor = restore_links(self._index, links, self._cursor)
            if len(links) < _PAGE:
                return

    def _commit(self, items: list[_Append | _Admit], *, reconnected: bool = False) -> None:
        """Write ``items`` in one transaction and answer each once it is durable; when the
        transaction fails, write them one transaction each."""
        started = time.perf_counter()
        try:
            with self._index.tentative():
                answers = self._write(items)
        except Exception as exc:
            # Nothing was stored, and the index is as the last committed batch left it.
            if not reconnected and isinstance(exc, DBAPIError) and exc.connection_invalidated:
                # The ledger's connection was dead (the database restarted since the last
                # batch, say): the writer opens a fresh one; the same batch goes again once.
                _log.warning(
                    "scenario %r: the database connection was lost: %r", self.scenario, exc
                )
                self._commit(items, reconnected=True)
                return
            if len(items) == 1:
                if self._on_write is not None:
                    self._on_write(time.perf_counter() - started, 1)
                if isinstance(exc, OperationalError) and self._on_store_failure is not None:
                    item = items[0]
                    record = item.record if isinstance(item, _Append) else item.report
                    self._on_store_failure(exc, len(dumps(record).encode()))
                items[0].done.set_exception(exc)
                return
            _log.warning(
                "scenario %r: a batch of %d writes failed (%r); writing them one at a time",
                self.scenario,
                len(items),
                exc,
            )
            for item in items:
                self._commit([item], reconnected=reconnected)
            return
        if self._on_write is not None:
            self._on_write(time.perf_counter() - started, 0)
        for answer in answers:
            answer()

    def _write(self, items: list[_Append | _Admit]) -> list[Callable[[], object]]:
        """Judge and take each item, in order, inside one transaction; returns how to answer
        each once it committed. A refusal took nothing, so its neighbours stand."""
        ids: list[str] = []
        for item in items:
            if isinstance(item, _Append):
                ids.append(item.record.id)
            else:
                ids += (item.report.id, *item.report.references)
        answers: list[Callable[[], object]] = []
        # The index catches up with the store inside the transaction, under the scenario's
        # write lock: no other process can store a parent in between.
        with self.store.batch(self._index, self._cursor, writer=self._writer) as batch:
            batch.find(ids)
            for item in items:
                try:
                    if isinstance(item, _Append):
                        answers.append(partial(item.done.set_result, batch.add_call(item.record)))
                    else:
                        receipt = self._admit(batch, item.report)
                        answers.append(partial(item.done.set_result, receipt))
                except (ReportRejected, ApiError, StorageError, ValueError) as refusal:
                    answers.append(partial(item.done.set_exception, refusal))
        self._cursor = batch.cursor
        return answers

    def _admit(self, batch: RecordBatch, report: Report) -> tuple[ReportReceipt, bool]:
        receipt = ReportReceipt(report.id, report.scenario, report.references, content_hash(report))
        stored = batch.stored(report.id)
        if stored is not None and stored.scenario == self.scenario:
            if stored.kind != "report":
                raise _conflict(report, f"the id names a stored {stored.kind} record")
            # A retry: the same content gets the original receipt, even when the references
            # were evicted or continued since (P-REP-15); other content is a conflict.
            try:
                batch.add(report)
            except ConflictError:
                raise _conflict(report, "a report with this id has other content") from None
            return receipt, False
        for position, reference in enumerate(report.references):
            self._check_reference(batch, reference, f"$.references[{position}]")
        try:
            new = batch.add(report)
        except ConflictError as exc:  # the id is taken in another scenario
            raise _conflict(report, str(exc)) from None
        return receipt, new

    def _check_reference(self, batch: RecordBatch, reference: str, field: str) -> None:
        found = batch.stored(reference)
        if found is None or found.scenario != self.scenario:
            # Another scenario's record: in this database, or in another scenario's.
            if found is not None or any(other.get(reference) for other in self._other_stores):
                raise ReportRejected(
                    "foreign",
                    field,
                    f"{reference!r} is a record of another scenario, not of {self.scenario!r}",
                )
            raise ReportRejected(
                "missing", field, f"no record {reference!r} is stored in {self.scenario!r}"
            )
        if found.kind != "inference":
            raise ReportRejected(
                "wrong-kind", field, f"{reference!r} is a {found.kind} record, not an inference"
            )
        # Judged with the index as it stands at this point of the batch: calls taken before
        # the report count, calls queued after it do not (as if each were committed alone).
        if not self._index.is_last_call(reference):
            child = self._index.children(reference)[0]
            raise ReportRejected(
                "inner",
                field,
                f"{reference!r} is not the last call of its trajectory: call {child!r} continues"
                " it; reference the last call",
            )


def _conflict(report: Report, reason: str) -> ApiError:
    return ApiError.one(409, "conflict", "$.id", f"report {report.id!r}: {reason}")
