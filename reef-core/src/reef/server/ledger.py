"""A scenario's ledger: the one writer of its records in this process, with its trajectory index.

Every record the service admits for a scenario (an inference record, a report) goes through the
scenario's :class:`ScenarioLedger`, which runs on a thread of its own:

- it keeps the scenario's :class:`~reef.core.trajectory_index.TrajectoryIndex`, rebuilt from the
  store's link entries (no bodies) when the ledger starts;
- inference records waiting together are linked in arrival order and appended in one
  transaction (group commit: one durable commit answers many calls). Inside that transaction,
  under the scenario's write lock, the index first restores the link entries other processes
  of the deployment stored since (:meth:`~reef.storage.RecordStore.append_calls`), so several
  processes on one store link exactly as one writer would;
- a report is admitted after the inference records queued before it are durable and the index
  caught up with the store, against the store: each reference must be a stored inference
  record of the scenario that no stored call continues (P-REP-1, P-REP-2).

Answers go back to the asyncio loop through :class:`concurrent.futures.Future` values, which
the routes await with :func:`asyncio.wrap_future`.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Final

import attrs

from reef.core.records import InferenceRecord, Report
from reef.core.trajectory_index import LinkEntry, TrajectoryIndex
from reef.server.bodies import ReportReceipt
from reef.server.errors import ApiError, ReportRejected
from reef.storage import ConflictError, Position, RecordStore
from reef.storage.records import content_hash

__all__ = ["ScenarioLedger"]

_log = logging.getLogger(__name__)

#: The most inference records appended in one transaction.
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
    """

    def __init__(self, store: RecordStore, other_stores: Sequence[RecordStore]) -> None:
        self.store = store
        self.scenario = store.scenario
        self._other_stores = other_stores
        self._index = TrajectoryIndex()
        self._cursor: Position | None = None
        self._queue: queue.SimpleQueue[_Item] = queue.SimpleQueue()
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
            pending: list[_Append] = []
            for item in batch:
                if isinstance(item, _Append):
                    pending.append(item)
                    continue
                self._flush(pending)
                pending = []
                if isinstance(item, _Stop):
                    return
                self._admit(item)
            self._flush(pending)

    def _catch_up(self) -> None:
        """Restore the link entries other writers stored since the last read (store order);
        reads no body."""
        while True:
            links = self.store.read_links_after(self._cursor, _PAGE)
            for link in links:
                self._cursor = link.position
                if link.entry.call_id not in self._index:
                    self._index.restore(link.entry)
            if len(links) < _PAGE:
                return

    def _flush(self, pending: list[_Append]) -> None:
        if not pending:
            return
        try:
            # The index catches up with the store inside the append's transaction, under the
            # scenario's write lock: no other process can store a parent in between.
            entries, self._cursor = self.store.append_calls(
                [append.record for append in pending], self._index, self._cursor
            )
        except Exception as exc:
            # Nothing was stored, but the index may hold some of the calls: start it afresh
            # (the next append or admission rebuilds it from the store's link entries).
            self._index = TrajectoryIndex()
            self._cursor = None
            for append in pending:
                append.done.set_exception(exc)
            return
        for append, entry in zip(pending, entries, strict=True):
            append.done.set_result(entry)

    def _admit(self, item: _Admit) -> None:
        try:
            self._catch_up()  # an "inner" reference is judged against every stored call
            item.done.set_result(self._admit_report(item.report))
        except Exception as exc:
            item.done.set_exception(exc)

    def _admit_report(self, report: Report) -> tuple[ReportReceipt, bool]:
        receipt = ReportReceipt(report.id, report.scenario, report.references, content_hash(report))
        stored = self.store.get(report.id)
        if stored is not None:
            if stored.kind != "report":
                raise _conflict(report, f"the id names a stored {stored.kind} record")
            # A retry: the same content gets the original receipt, even when the references
            # were evicted or continued since (P-REP-15); other content is a conflict.
            try:
                self.store.append(report)
            except ConflictError:
                raise _conflict(report, "a report with this id has other content") from None
            return receipt, False
        for position, reference in enumerate(report.references):
            self._check_reference(reference, f"$.references[{position}]")
        try:
            new = self.store.append(report)
        except ConflictError as exc:  # the id is taken in another scenario
            raise _conflict(report, str(exc)) from None
        return receipt, new

    def _check_reference(self, reference: str, field: str) -> None:
        found = self.store.get(reference)
        if found is None:
            if any(other.get(reference) is not None for other in self._other_stores):
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
