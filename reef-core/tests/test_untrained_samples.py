"""The buffer over a trainer's untrained samples (``reef.train.buffer.UntrainedSamples``).

rule: P-BUF-3 P-BUF-4 Step 2 keeps the kind of the first sample in store order, held out or
not; step 3 then leaves out the stale samples and their groups.
"""

from __future__ import annotations

from reef.core.job_data import Sample, TaskSample, TrajectorySample
from reef.storage.positions import Position
from reef.train.buffer import Entry, UntrainedSamples


def _trajectory(sample_id: str, group_id: str | None = None) -> TrajectorySample:
    return TrajectorySample({"steps": []}, sample_id=sample_id, group_id=group_id)


def _task(sample_id: str) -> TaskSample:
    return TaskSample(sample_id, {}, sample_id=sample_id)


def _entry(seq: int, sample: Sample) -> Entry:
    return Entry(Position(0, seq), "record", sample)


def test_kind_is_the_first_samples_after_a_group_is_held_out_by_a_later_stale_member() -> None:
    """rule: P-BUF-3 P-BUF-4 -- the first sample in store order is a trajectory whose group a
    later stale member holds out; a task comes before the other stale trajectory. The buffer is
    of trajectories (here: none fresh), also after the verdicts are judged again."""
    stale: set[str] = set()
    untrained = UntrainedSamples(lambda s: s.sample_id in stale, lambda e: True)
    untrained.add(_entry(1, _trajectory("a", group_id="g")))
    untrained.add(_entry(5, _task("t")))
    untrained.add(_entry(10, _trajectory("c")))
    untrained.add(_entry(20, _trajectory("d", group_id="g")))
    untrained.add(_entry(30, _trajectory("e")))
    stale.update({"c", "d"})
    untrained.rejudge()
    buffer = untrained.auto_buffer(None, handed_out=(), limit=None)
    # "a" (held out with its group) is the first sample: its kind, trajectory, is kept.
    assert [e.sample_id for e in buffer] == ["e"]


def test_a_handed_out_sample_does_not_choose_the_kind() -> None:
    """rule: P-BUF-2 P-BUF-3 -- handed-out job data is left out at step 1, before the kind is
    chosen, even when it became stale while reserved."""
    stale: set[str] = set()
    untrained = UntrainedSamples(lambda s: s.sample_id in stale, lambda e: True)
    untrained.add(_entry(1, _trajectory("a")))
    untrained.add(_entry(5, _task("t")))
    untrained.add(_entry(10, _trajectory("e")))
    stale.add("a")
    untrained.rejudge()
    buffer = untrained.auto_buffer(None, handed_out={"a"}, limit=None)
    assert [e.sample_id for e in buffer] == ["t"]


def test_a_group_freed_by_removing_its_stale_member_keeps_store_order() -> None:
    """rule: P-BUF-2 P-BUF-4 -- the stale member of a group leaves (trained); its fresh mate,
    first in store order, comes back to the buffer in its place, before later samples."""
    stale: set[str] = set()
    untrained = UntrainedSamples(lambda s: s.sample_id in stale, lambda e: True)
    stale.add("d")
    untrained.add(_entry(1, _trajectory("a", group_id="g")))
    untrained.add(_entry(5, _trajectory("b")))
    untrained.add(_entry(20, _trajectory("d", group_id="g")))
    assert [e.sample_id for e in untrained.auto_buffer(None, handed_out=(), limit=None)] == ["b"]
    untrained.remove(["d"])
    buffer = untrained.auto_buffer(None, handed_out=(), limit=None)
    assert [e.sample_id for e in buffer] == ["a", "b"]
