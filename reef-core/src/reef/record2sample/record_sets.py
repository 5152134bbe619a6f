"""The values a record-to-sample stage forms: record sets, their units, and a set's result.

A :class:`RecordSet` is what a stage makes samples from; a :class:`RecordSetUnit` is the record
sets that must train in the same job; a :class:`SampleResult` is what making the samples of one
set gave, and settles every record of the set together (P-SET-7). A :class:`ReportContext` is a
report with the calls it scores, as a reported-feedback recipe reads it; its record set is the
report's.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import attrs

from reef.core.job_data import Sample
from reef.core.records import InferenceRecord, JudgedRecord, Record, Report
from reef.errors import ReefError


class RecordSetError(ReefError, ValueError):
    """A value that is no record set, or a set a stage cannot form; names the set."""


class RecordSetOverlap(RecordSetError):
    """``form`` refused a set holding records of another set of the stage (P-SET-5).

    :ivar set_id: the refused set.
    :ivar record_ids: its records that another set holds.
    """

    def __init__(self, set_id: str, record_ids: Sequence[str]) -> None:
        self.set_id = set_id
        self.record_ids = tuple(record_ids)
        super().__init__(
            f"record set {set_id!r} holds records of another set: {', '.join(self.record_ids)}"
        )


def _references(record: Record) -> tuple[str, ...]:
    if isinstance(record, Report):
        return record.references
    if isinstance(record, JudgedRecord):
        return (record.record_id,)
    return ()


@attrs.frozen
class RecordSet:
    """One or more records that a stage makes samples from (P-SET-1).

    A value is a record set exactly when it holds at least one record and holds every record
    that its records reference (a report's references, a judged record's inference). The id is
    the id of the record that defines the set: the report, the trajectory's last call, the
    judged record, the single inference.

    :ivar id: the set's id; sample ``i`` of the set is stored as ``<s>:<i>`` (P-SET-18).
    :ivar records: the set's records, oldest first.
    """

    id: str
    records: tuple[Record, ...] = attrs.field()

    @records.validator
    def _closed(self, _: attrs.Attribute[Any], records: tuple[Record, ...]) -> None:
        if not records:
            raise RecordSetError(f"record set {self.id!r} holds no record")
        ids = {record.id for record in records}
        if len(ids) != len(records):
            raise RecordSetError(f"record set {self.id!r} holds a record twice")
        missing = [ref for record in records for ref in _references(record) if ref not in ids]
        if missing:
            raise RecordSetError(
                f"record set {self.id!r} lacks records its records reference: {', '.join(missing)}"
            )

    @property
    def record_ids(self) -> tuple[str, ...]:
        """The ids of the set's records, in set order."""
        return tuple(record.id for record in self.records)

    @property
    def inferences(self) -> tuple[InferenceRecord, ...]:
        """The set's inference records, in set order."""
        return tuple(r for r in self.records if isinstance(r, InferenceRecord))

    @property
    def engine_aborted(self) -> bool:
        """True when any inference response of the set is an engine abort (P-SET-10)."""
        return any(record.is_engine_abort for record in self.inferences)


@attrs.frozen
class RecordSetUnit:
    """Record sets that must train in the same job (P-SET-14).

    A report alone is a unit of its one set; a ready group is a unit of the sets of all its
    reports. When the unit has more than one sample, its samples share a group in the store.

    :ivar id: the unit's id (its first set's id), from which the store group is named.
    :ivar record_sets: the unit's sets, in the order they joined it.
    """

    id: str
    record_sets: tuple[RecordSet, ...] = attrs.field()

    @record_sets.validator
    def _some_sets(self, _: attrs.Attribute[Any], sets: tuple[RecordSet, ...]) -> None:
        if not sets:
            raise RecordSetError(f"record set unit {self.id!r} holds no record set")

    @classmethod
    def of(cls, *record_sets: RecordSet) -> RecordSetUnit:
        """The unit of ``record_sets``, named after the first."""
        return cls(record_sets[0].id, record_sets)

    @property
    def record_ids(self) -> tuple[str, ...]:
        """Every record of the unit's sets: what storing its samples consumes (P-SET-16)."""
        return tuple(rid for record_set in self.record_sets for rid in record_set.record_ids)


class SampleStatus(enum.Enum):
    """How making a set's samples ended (P-SET-8, P-SET-9)."""

    #: One or more samples: the set's records wait in a unit.
    READY = "ready"
    #: No sample: the stage ends the set's records.
    SKIPPED = "skipped"


@attrs.frozen
class SampleResult:
    """The samples of one record set, or why it has none.

    :ivar status: READY exactly when ``samples`` is not empty.
    :ivar samples: the set's samples, in index order.
    :ivar reason: why a SKIPPED set has no sample (counted by reason, never silent).
    """

    status: SampleStatus
    samples: tuple[Sample, ...] = ()
    reason: str | None = None

    def __attrs_post_init__(self) -> None:
        if (self.status is SampleStatus.READY) != bool(self.samples):
            raise ValueError("a READY result holds samples and a SKIPPED one holds none")

    @classmethod
    def ready(cls, samples: Sequence[Sample]) -> SampleResult:
        """One or more samples; a result of none is SKIPPED with reason ``no_sample``."""
        if not samples:
            return cls.skipped("no_sample")
        return cls(SampleStatus.READY, tuple(samples))

    @classmethod
    def skipped(cls, reason: str) -> SampleResult:
        """No sample, for ``reason``."""
        return cls(SampleStatus.SKIPPED, (), reason)


class ReportError(ReefError, ValueError):
    """A report the stage cannot take: names the report and why (training data errors
    propagate, P-REP-14)."""


class MissingScore(ReportError):
    """``ReportContext.require_score`` found a report without a score."""


@attrs.frozen
class ReportContext:
    """One report with the records it scores, as a recipe reads it.

    :ivar report: the report.
    :ivar inferences: every call of the report's trajectories, oldest first.
    :ivar ends: the referenced last calls, in the report's reference order; a method that
        trains one call reads an end, whose request holds the earlier turns.
    """

    report: Report
    inferences: tuple[InferenceRecord, ...]
    ends: tuple[InferenceRecord, ...]

    def require_score(self) -> float:
        """The report's score, for a method that needs a reward.

        :raises MissingScore: when the report has none.
        """
        if self.report.score is None:
            raise MissingScore(f"report {self.report.id!r} has no score, and this method needs one")
        return self.report.score

    @property
    def record_set(self) -> RecordSet:
        """The report's record set: its calls, oldest first, then the report."""
        return RecordSet(self.report.id, (*self.inferences, self.report))
