"""Reported feedback: ``ReportSamples`` and the recipe's ``ReportGrouping`` (P-REP-*).

A report references the last call of each trajectory it scores. The stage links inference
records into trajectories as they arrive (:class:`reef.core.trajectory_index.TrajectoryIndex`),
and for each report forms one record set: the report and every call of its trajectories
(P-SET-3). The recipe decides, through its :class:`ReportGrouping`, which reports are its
training data, where each report goes (a group and a slot), and when a group is complete; and,
through :meth:`ReportSamples.make_sample`, the sample of one report.

Ownership: a record is in at most one set. A report whose trajectories hold a call another set
took ends without training (P-SET-6), whether that set waits or trained long ago. A report that
became a set owns its calls outright, even when it ends later (a discarded group); a report
that ends before (its slot was taken, it is no training report) leaves its calls to others,
unless the stage has ``exclusive_sources`` (P-REP-7).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Hashable, Sequence
from typing import Any, ClassVar

import attrs

from reef.core.job_data import Sample, TaskSample, TrajectorySample
from reef.core.plugins import PluginSettings, Record2SampleSettings
from reef.core.records import InferenceRecord, Record, Report, has_eligibility_flag
from reef.core.trajectory_index import TrajectoryIndex
from reef.pipeline_context import PipelineContext
from reef.record2sample.assembly import SampleAssembly
from reef.record2sample.record_sets import (
    RecordSet,
    RecordSetUnit,
    ReportContext,
    ReportError,
    SampleResult,
    SampleStatus,
)
from reef.record2sample.stage import Record2Sample, SettingsT

logger = logging.getLogger(__name__)

#: Reasons a report (or its records) ends without training; each is counted (never silent).
SHARED_TRAJECTORY = "shared_trajectory"
SLOT_TAKEN = "slot_taken"
NOT_TRAINING_REPORT = "not_training_report"
OTHER_COMPONENT_REPORT = "other_component_report"
GROUP_DISCARDED = "group_discarded"
NO_SIGNAL = "no_signal"
LEFT_OUT_OF_GROUP = "left_out_of_group"
NOT_A_REPORT = "not_a_report"

#: The report metadata key that names a report's type, for scenarios of several components.
REPORT_TYPE_KEY = "report_type"


@attrs.frozen
class SkippedReport:
    """``make_sample``'s answer for a valid report that cannot train (P-REP-11)."""

    reason: str


class GroupDecision(enum.Enum):
    """What a grouping decides of a group's members (P-REP-10)."""

    INCOMPLETE = "incomplete"
    READY = "ready"
    DISCARD = "discard"
    #: complete, but its members' scores all tie (DAPO's dynamic sampling): discarded, each
    #: member counted as ``no_signal``.
    NO_SIGNAL = "no_signal"


class ReportGrouping:
    """A recipe's decisions about reports; the default trains every report by itself.

    Every method is an extension point: :meth:`is_training_report` (which reports are this
    method's data), :meth:`placement` (which group and slot), :meth:`decide` (when a group is
    complete) and :meth:`members_to_train` (which members of a complete group train). Runs on
    the trainer thread and reads only records (no model call, no I/O).
    """

    def is_training_report(self, report: Report) -> bool:
        """False for a valid report that is not this method's training data (P-REP-8)."""
        del report
        return True

    def placement(self, context: ReportContext) -> tuple[Hashable | None, str | None]:
        """The report's (group key, slot) (P-REP-9). ``(None, None)``: an independent sample.

        A ``None`` slot is the report's id; a slot already filled keeps its first report.
        """
        del context
        return None, None

    def decide(self, key: Hashable, members: tuple[ReportContext, ...]) -> GroupDecision:
        """Whether the group ``key`` with ``members`` (arrival order) is complete (P-REP-10)."""
        del key, members
        return GroupDecision.READY

    def members_to_train(
        self, key: Hashable, members: tuple[ReportContext, ...]
    ) -> Sequence[ReportContext]:
        """Which members of the group ``key``, just decided READY, train; the default: all.

        Each member left out ends as ``left_out_of_group`` (counted, never silent), and its
        calls stay its own (P-SET-5); the members kept train as one unit, in arrival order. A
        best-of-N method keeps the best-scored members here. Returning none discards the group.

        :param members: every member of the group, in arrival order (as ``decide`` saw them).
        :returns: some of ``members`` (the same values), in any order.
        """
        del key
        return members


@attrs.define
class _Group:
    key: Hashable
    slots: dict[str, ReportContext] = attrs.field(factory=dict)
    sets: list[RecordSet] = attrs.field(factory=list)


class ReportSamples(Record2Sample[SettingsT]):
    """The record-to-sample stage of a reported-feedback recipe (P-REP-4).

    :param context: the pipeline's context.
    :param grouping: the recipe's grouping; ``None`` trains every valid report by itself.
    :param exclusive_sources: a report that ends before it becomes a set takes its calls with
        it, so no later report can train on them (P-REP-7).
    :param max_staleness: see :class:`Record2Sample`.
    """

    Settings: ClassVar[type[PluginSettings]] = Record2SampleSettings

    #: Extension point: the default :meth:`make_sample` keeps the engine's sampled token ids and
    #: log probabilities in the sample (``SampleAssembly(keep_tokens=True)``), so the component
    #: trains them as they are; a stage sets it from its settings (``train_sampled_tokens``).
    keep_tokens: bool = False

    #: Extension point: the report type this stage trains on, in a scenario whose components
    #: take reports of several types (``metadata.report_type``); ``None`` takes reports without
    #: a type.
    report_type: ClassVar[str | None] = None

    def __init__(
        self,
        context: PipelineContext,
        grouping: ReportGrouping | None = None,
        *,
        exclusive_sources: bool = False,
        max_staleness: int = 0,
    ) -> None:
        super().__init__(context, max_staleness=max_staleness)
        self.grouping = grouping if grouping is not None else ReportGrouping()
        self.exclusive_sources = exclusive_sources
        self.index = TrajectoryIndex()
        self._order: dict[str, int] = {}
        self._seen_reports: set[str] = set()
        self._groups: dict[Hashable, _Group] = {}
        self._contexts: dict[str, ReportContext] = {}

    # -- records in ------------------------------------------------------------------------

    def push(self, record: Record) -> None:
        """Index an inference; take a report (see the module docstring); end anything else."""
        if isinstance(record, InferenceRecord):
            self._index(record)
            self.hold(record)
        elif isinstance(record, Report):
            self._take_report(record)
        else:
            self.end((record,), NOT_A_REPORT)

    def replay_consumed(self, record: Record) -> None:
        """Index a consumed call, so that a later report on its trajectory sees it taken."""
        if isinstance(record, InferenceRecord):
            self._index(record)
        elif isinstance(record, Report):
            self._seen_reports.add(record.id)
        super().replay_consumed(record)

    def _index(self, record: InferenceRecord) -> None:
        if record.id not in self.index:
            self.index.add(record)
            self._order[record.id] = len(self._order)

    def _take_report(self, report: Report) -> None:
        if report.id in self._seen_reports:
            return  # the same report again (a replay): it was taken once (P-REP-12)
        self._seen_reports.add(report.id)
        try:
            self._place_report(report)
        except BaseException:
            # Failed assembly leaves the report unprocessed and its records held (P-REP-14).
            self._seen_reports.discard(report.id)
            raise

    def _place_report(self, report: Report) -> None:
        if has_eligibility_flag(report.metadata):
            # Admission refuses it; only a report stored before that rule can get here.
            raise ReportError(
                f"report {report.id!r} carries metadata.training.eligible, which reports may no"
                " longer carry: correct the stored report before it is replayed (P-LAYOUT-5)"
            )
        report_type = report.metadata.get(REPORT_TYPE_KEY)
        if report_type is not None and report_type != self.report_type:
            if report_type not in self.context.admitted_report_types:
                raise ReportError(
                    f"report {report.id!r} has type {report_type!r}, which {type(self).__name__}"
                    " does not train and the scenario does not admit"
                )
            self.end((report,), OTHER_COMPONENT_REPORT)
            return
        unknown = [ref for ref in report.references if ref not in self.index]
        if unknown:
            raise ReportError(
                f"report {report.id!r} references calls the stage never saw: {', '.join(unknown)}"
            )
        call_ids = sorted(
            {cid for ref in report.references for cid in self.index.trajectory(ref)},
            key=self._order.__getitem__,
        )
        if not self.grouping.is_training_report(report):
            self._end_before_set(report, call_ids, NOT_TRAINING_REPORT)
            return
        if any(self.is_taken(cid) for cid in call_ids):
            self._end_before_set(report, call_ids, SHARED_TRAJECTORY)
            return
        calls = {cid: self.held_record(cid) for cid in call_ids}
        context = ReportContext(
            report,
            tuple(r for r in calls.values() if isinstance(r, InferenceRecord)),
            tuple(r for ref in report.references if isinstance(r := calls[ref], InferenceRecord)),
        )
        key, slot = self.grouping.placement(context)
        if key is None:
            self._form_report(context, self.form_unit)
            return
        group = self._groups.setdefault(key, _Group(key))
        slot = report.id if slot is None else slot
        if slot in group.slots:
            self._end_before_set(report, call_ids, SLOT_TAKEN)
            return
        record_set = self._form_report(context, self.form)
        if record_set is None:
            return
        group.slots[slot] = context
        group.sets.append(record_set)
        members = tuple(group.slots.values())
        decision = self.grouping.decide(key, members)
        if decision is GroupDecision.INCOMPLETE:
            return
        kept = self._kept_sets(key, members, group) if decision is GroupDecision.READY else []
        # Decided: the group is fixed; a later report with the same key opens a new group.
        del self._groups[key]
        if not kept:
            reason = NO_SIGNAL if decision is GroupDecision.NO_SIGNAL else GROUP_DISCARDED
            for member in group.sets:
                self.discard(member, reason)
            return
        kept_ids = {record_set.id for record_set in kept}
        for member in group.sets:
            if member.id not in kept_ids:
                self.discard(member, LEFT_OUT_OF_GROUP)
        self.make_unit_ready(RecordSetUnit.of(*kept))

    def _kept_sets(
        self, key: Hashable, members: tuple[ReportContext, ...], group: _Group
    ) -> list[RecordSet]:
        """The sets of the members that ``members_to_train`` keeps, in arrival order."""
        kept = {member.report.id for member in self.grouping.members_to_train(key, members)}
        strangers = kept - {member.report.id for member in members}
        if strangers:
            raise ReportError(
                f"{type(self.grouping).__name__}.members_to_train kept reports that are not"
                f" members of group {key!r}: {', '.join(sorted(strangers))}"
            )
        return [record_set for record_set in group.sets if record_set.id in kept]

    def _end_before_set(self, report: Report, call_ids: Sequence[str], reason: str) -> None:
        # A single referenced call stays for a report that trains on it; more go with the
        # report only when it references several calls, or under exclusive_sources (P-REP-8).
        self.end((report,), reason)
        if self.exclusive_sources or (reason == NOT_TRAINING_REPORT and len(report.references) > 1):
            free = [r for cid in call_ids if (r := self.held_record(cid)) is not None]
            self.end(free, reason)

    def _form_report(
        self, context: ReportContext, form: Callable[[RecordSet], SampleResult]
    ) -> RecordSet | None:
        """The report's set, formed by ``form`` (:meth:`form`, or :meth:`form_unit` for a
        report that trains by itself); ``None`` when it has no sample."""
        record_set = context.record_set
        self._contexts[record_set.id] = context
        try:
            result = form(record_set)
        finally:
            del self._contexts[record_set.id]
        return record_set if result.status is SampleStatus.READY else None

    def make_samples(self, record_set: RecordSet) -> SampleResult:
        """The report's one sample, from :meth:`make_sample`, with its source and report ids."""
        context = self._contexts[record_set.id]
        made = self.make_sample(context)
        if isinstance(made, SkippedReport):
            return SampleResult.skipped(made.reason)
        sources = tuple(r.id for r in context.inferences)
        if isinstance(made, TrajectorySample):
            made = attrs.evolve(made, source_record_ids=sources, report_id=context.report.id)
        elif isinstance(made, TaskSample):
            metadata = {**made.metadata, "source_record_ids": list(sources)}
            made = attrs.evolve(made, metadata={**metadata, "report_id": context.report.id})
        return SampleResult.ready((made,))

    def make_sample(self, context: ReportContext) -> Sample | SkippedReport:
        """Extension point: the sample of one report (P-REP-5); override when the default does not
        fit.

        The default makes the report's trajectories one ATIF trajectory sample, every call of
        them, with the report's score as reward and its feedback (and the engine's sampled
        tokens with ``keep_tokens``).
        """
        return SampleAssembly(
            accept_multi_turn_policy_samples=True, keep_tokens=self.keep_tokens
        ).build(context)

    def discard_open_group(self, key: Hashable, reason: str) -> bool:
        """End the open group ``key`` without training: every member's set is discarded and its
        records end under ``reason`` (counted, never silent).

        For a method whose group can no longer complete although ``decide`` was not asked
        again: TTTD abandons a step its runner left for a later one. The key is free again.

        :returns: False when no group ``key`` is open (nothing changes).
        """
        group = self._groups.pop(key, None)
        if group is None:
            return False
        for member in group.sets:
            self.discard(member, reason)
        return True

    def status(self) -> dict[str, Any]:
        """The base status, plus the groups that wait for members."""
        return {**super().status(), "open_groups": len(self._groups)}
