"""What a record-to-sample stage did with the records it was given: :class:`RecordBook`, and the
artifacts its scenario served: :class:`ServedArtifacts`.

Every stage keeps the same books, so they live here rather than on the author's class
(:class:`~reef.record2sample.stage.Record2Sample` owns one of each and answers the pipeline from
them):

- records the stage holds that no set took yet;
- every record a set took, ever (a record is in at most one set, P-SET-5);
- the sets formed and not stored or discarded yet, with the samples of the READY ones;
- the units whose samples wait to be stored, in the order they became ready;
- records that are done, consumed by stored samples (no reason) or ended without training
  (with the reason, counted), until the pipeline releases them after a commit (P-PIPE-16).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from reef.core.job_data import Sample
from reef.core.records import Record
from reef.record2sample.record_sets import (
    RecordSet,
    RecordSetError,
    RecordSetOverlap,
    RecordSetUnit,
)


class RecordBook:
    """The record lifecycle of one stage (see the module documentation)."""

    def __init__(self) -> None:
        self.held: dict[str, Record] = {}
        # Kept after release: a later set that holds one of them is refused.
        self.taken: set[str] = set()
        self.sets: dict[str, RecordSet] = {}
        #: The samples of each READY set whose unit is not stored yet, by set id (P-SET-8).
        self.set_samples: dict[str, tuple[Sample, ...]] = {}
        self.ready_units: dict[str, RecordSetUnit] = {}
        self.done: dict[str, str | None] = {}
        self.ended_counts: Counter[str] = Counter()

    def check_new(self, record_set: RecordSet) -> None:
        """Refuse a set that holds a record another set took, or that is formed already.

        :raises RecordSetOverlap: naming the records taken before.
        :raises RecordSetError: for a set id formed already.
        """
        overlap = [rid for rid in record_set.record_ids if rid in self.taken]
        if overlap:
            raise RecordSetOverlap(record_set.id, overlap)
        if record_set.id in self.sets:
            raise RecordSetError(f"record set {record_set.id!r} is already formed")

    def formed(self, record_set: RecordSet) -> None:
        """``record_set`` took its records: no other set may hold them, ever."""
        self.take(record_set.record_ids)
        self.sets[record_set.id] = record_set

    def take(self, record_ids: Iterable[str]) -> None:
        """The records are taken (by a set, or ended): no later set can hold them."""
        for rid in record_ids:
            self.taken.add(rid)
            self.held.pop(rid, None)

    def end(self, record_ids: Iterable[str], reason: str) -> None:
        """The records are done without training, counted under ``reason`` once each."""
        for rid in record_ids:
            if rid not in self.done:
                self.done[rid] = reason
                self.ended_counts[reason] += 1

    def discard(self, record_set: RecordSet, reason: str) -> None:
        """Forget a formed set and its samples; its records end under ``reason``."""
        self.sets.pop(record_set.id, None)
        self.set_samples.pop(record_set.id, None)
        self.end(record_set.record_ids, reason)

    def unit_ready(self, unit: RecordSetUnit) -> None:
        """Every set of ``unit`` has its samples: the pipeline may store it (P-SET-15).

        :raises RecordSetError: when a set of the unit has no samples held.
        """
        missing = [s.id for s in unit.record_sets if s.id not in self.set_samples]
        if missing:
            raise RecordSetError(f"unit {unit.id!r}: sets without samples: {', '.join(missing)}")
        self.ready_units[unit.id] = unit

    def consumed(self, unit: RecordSetUnit) -> None:
        """The unit's samples are stored with its records: forget them; its records are done
        (P-SET-17)."""
        self.ready_units.pop(unit.id, None)
        for record_set in unit.record_sets:
            self.set_samples.pop(record_set.id, None)
            self.sets.pop(record_set.id, None)
            for rid in record_set.record_ids:
                self.done.setdefault(rid, None)

    def releasable(self) -> tuple[str, ...]:
        """Done records that no set still formed references (P-STALE-1)."""
        held_by_sets = {rid for s in self.sets.values() for rid in s.record_ids}
        return tuple(rid for rid in self.done if rid not in held_by_sets)

    def ended(self) -> Mapping[str, str]:
        """The done records that ended without training, with their reasons."""
        return {rid: reason for rid, reason in self.done.items() if reason is not None}

    def release(self, record_ids: Iterable[str]) -> None:
        """Free the memory of done records after a successful commit (P-PIPE-16)."""
        for rid in record_ids:
            self.done.pop(rid, None)
            self.held.pop(rid, None)


class ServedArtifacts:
    """The artifacts a scenario served, oldest first (P-STALE-5), and how far behind the
    current one an artifact is."""

    def __init__(self) -> None:
        self._order: dict[str, int] = {}
        self._count = 0
        self._serving: str | None = None

    def observe(self, artifact_id: str) -> None:
        """The scenario serves ``artifact_id`` now. Serving the same artifact again does not
        age any data; an artifact served again later (a rollback) counts from then."""
        if artifact_id == self._serving:
            return
        self._serving = artifact_id
        self._order[artifact_id] = self._count
        self._count += 1

    def __bool__(self) -> bool:
        """True once an artifact was served."""
        return bool(self._order)

    def lag(self, artifact_id: str) -> int | None:
        """How many artifacts were served after ``artifact_id``; ``None`` for one never seen."""
        position = self._order.get(artifact_id)
        return None if position is None else self._count - 1 - position
