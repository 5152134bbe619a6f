"""``TrajectorySamples``: train each trajectory that went idle without a report (P-SET-4).

The stage links calls into trajectories as they arrive. A trajectory whose last call saw no
new call for ``trajectory_idle_seconds`` is done: at the next ``advance(now)`` its calls form
one record set, and its sample is the whole trajectory (every reply trains). Two branches share
their common calls; the first set takes them, and the other branch ends without training,
counted as ``shared_trajectory`` (P-SET-5; docs/decisions.md#linking-calls-into-trajectories).
"""

from __future__ import annotations

from typing import ClassVar

import attrs

from reef.core.config import config_option
from reef.core.job_data import TrajectorySample
from reef.core.plugins import PluginSettings, Record2SampleSettings
from reef.core.records import InferenceRecord, Record
from reef.core.trajectory_index import TrajectoryIndex
from reef.pipeline_context import PipelineContext
from reef.record2sample.assembly import SampleAssembly
from reef.record2sample.record_sets import RecordSet
from reef.record2sample.reports import NOT_A_REPORT, SHARED_TRAJECTORY
from reef.record2sample.stage import Record2Sample


@attrs.frozen
class TrajectorySamplesSettings(Record2SampleSettings):
    """``TrajectorySamples``' keys: its idle time beside ``max_staleness``."""

    trajectory_idle_seconds: float = config_option(
        default=60.0,
        help="seconds without a new call after which a trajectory is done and trains",
        validator=attrs.validators.gt(0),
    )


class TrajectorySamples(Record2Sample):
    """Makes one sample of each trajectory that went idle (reports and judgments end).

    :param trajectory_idle_seconds: how long a trajectory's last call waits for a next call.
    """

    Settings: ClassVar[type[PluginSettings]] = TrajectorySamplesSettings

    def __init__(
        self,
        context: PipelineContext,
        *,
        trajectory_idle_seconds: float = 60.0,
        max_staleness: int = 0,
    ) -> None:
        super().__init__(context, max_staleness=max_staleness)
        self.trajectory_idle_seconds = trajectory_idle_seconds
        self.index = TrajectoryIndex()
        # The last calls that wait to go idle, with the time of their end, in arrival order.
        self._waiting: dict[str, float] = {}

    def push(self, record: Record) -> None:
        """Link a call and let its trajectory wait; end anything that is not a call."""
        if not isinstance(record, InferenceRecord):
            self.end((record,), NOT_A_REPORT)
            return
        self._link(record)
        self.hold(record)
        parent = self.index.parent(record.id)
        if parent is not None:
            self._waiting.pop(parent, None)
        self._waiting[record.id] = max(record.ended_at, record.started_at)

    def replay_consumed(self, record: Record) -> None:
        """Link a consumed call, so that a later branch through it sees it taken."""
        if isinstance(record, InferenceRecord):
            self._link(record)
        super().replay_consumed(record)

    def _link(self, record: InferenceRecord) -> None:
        if record.id not in self.index:
            self.index.add(record)

    def advance(self, now: float) -> None:
        """Form the set of each trajectory idle for ``trajectory_idle_seconds`` at ``now``."""
        due = [cid for cid, at in self._waiting.items() if now - at >= self.trajectory_idle_seconds]
        for call_id in due:
            del self._waiting[call_id]
            ids = self.index.trajectory(call_id)
            held = [r for cid in ids if (r := self.held_record(cid)) is not None]
            if len(held) != len(ids):  # a call of it is another set's, or ended
                self.end(held, SHARED_TRAJECTORY)
                continue
            self.form_unit(RecordSet(call_id, tuple(held)))

    def make_samples(self, record_set: RecordSet) -> tuple[TrajectorySample]:
        """The trajectory's one sample: every call, every reply trains."""
        return (self.trajectory_sample(record_set),)

    def trajectory_sample(self, record_set: RecordSet) -> TrajectorySample:
        """The sample of an idle trajectory's set; override to add metadata."""
        return SampleAssembly(accept_multi_turn_policy_samples=True).trajectory_sample(
            record_set.inferences, trajectory_id=record_set.id
        )
