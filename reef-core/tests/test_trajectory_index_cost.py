"""Linking a call costs work proportional to its own length, never to the calls stored.

rule: P-SET-2 (issue 2: "cost per call is proportional to the call's own length, never to the
number of stored calls"). Work is counted with ``TrajectoryIndex.probes`` (messages hashed and
dict probes), not timed.
"""

from __future__ import annotations

from typing import Any

from reef.core.records import InferenceRecord
from reef.core.trajectory_index import TrajectoryIndex


def session_calls(session: int, turns: int, retries: int = 1) -> list[InferenceRecord]:
    """One agent session: each call resends the conversation and adds a turn."""
    records: list[InferenceRecord] = []
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"}]
    for turn in range(turns):
        messages = [*messages, {"role": "user", "content": f"s{session} t{turn}"}]
        reply = {"role": "assistant", "content": f"reply {session}.{turn}"}
        for attempt in range(retries):
            records.append(
                InferenceRecord(
                    id=f"s{session}-t{turn}-a{attempt}",
                    scenario="s",
                    request={"messages": messages},
                    response={"choices": [{"message": reply, "finish_reason": "stop"}]},
                )
            )
        messages = [*messages, reply]
    return records


def work_of(index: TrajectoryIndex, record: InferenceRecord) -> int:
    before = index.probes
    index.add(record)
    return index.probes - before


def test_work_per_call_does_not_grow_with_stored_calls() -> None:
    """The same new call costs the same with 10 or 10,000 calls stored, all sharing a prompt."""
    probe = session_calls(session=-1, turns=12)
    small, large = TrajectoryIndex(), TrajectoryIndex()
    for record in session_calls(0, turns=10):
        small.add(record)
    for session in range(250):
        for record in session_calls(session, turns=20, retries=2):
            large.add(record)
    assert len(large) == 10_000
    small_work = [work_of(small, r) for r in probe]
    large_work = [work_of(large, r) for r in probe]
    assert small_work == large_work
    # And in proportion to the call's length: at most 2 probes per message, plus replies.
    for record, work in zip(probe, large_work, strict=True):
        assert work <= 3 * (len(record.messages) + 1) + len(record.reply_messages)


def test_work_per_call_is_bounded_by_its_length_while_the_store_grows() -> None:
    """Every add, across many sessions with retries, stays within a bound of its own length."""
    index = TrajectoryIndex()
    for session in range(200):
        for record in session_calls(session, turns=15, retries=3):
            work = work_of(index, record)
            assert work <= 3 * (len(record.messages) + 1) + len(record.reply_messages)
