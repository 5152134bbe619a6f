"""What a trainer offers a seal: groups (its units of samples) and their members."""

from __future__ import annotations

from typing import Any

import attrs

from agent_ecc.records import ExecutionRecord, RecordedScore


@attrs.frozen
class Member:
    """One sample of a group: the record of the attempt that produced it, its recorded score, and
    the reward its sample carried into the seal (E-GRADE-2: no record, ``execution`` is None)."""

    member_id: str
    execution: ExecutionRecord | None
    prior: RecordedScore | None
    recorded_reward: float


@attrs.frozen
class Candidate:
    """A group offered to a seal; ``handle`` is the trainer's own object, given back untouched."""

    group_id: str
    handle: Any = attrs.field(eq=False, repr=False)
    members: tuple[Member, ...]
