"""Records for stage and pipeline tests: calls of a conversation and the reports that score them.

``call("c3", 3, session="a")`` is the third call of conversation ``a``: its request holds the
two earlier turns, so it links to ``call("c2", 2, session="a")`` as a real agent's would.
"""

from __future__ import annotations

from typing import Any

from reef.core.records import InferenceRecord, Report


def call(
    cid: str,
    turns: int = 1,
    *,
    session: str = "a",
    artifact: str | None = "art1",
    at: float = 0.0,
    finish: str = "stop",
    scenario: str = "s",
) -> InferenceRecord:
    """Call ``turns`` of a conversation ``session``: its request holds the earlier turns."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"session {session}"}]
    for turn in range(1, turns):
        messages += [
            {"role": "user", "content": f"q{turn}"},
            {"role": "assistant", "content": f"a{turn}"},
        ]
    messages.append({"role": "user", "content": f"q{turns}"})
    response = {
        "choices": [
            {"message": {"role": "assistant", "content": f"a{turns}"}, "finish_reason": finish}
        ]
    }
    return InferenceRecord(
        cid,
        scenario,
        {"messages": messages},
        response,
        artifact_id=artifact,
        started_at=at,
        ended_at=at,
    )


def report(
    rid: str, *refs: str, score: float | None = 1.0, scenario: str = "s", **metadata: Any
) -> Report:
    """A report ``rid`` scoring the calls ``refs``, with ``metadata`` as given."""
    return Report(rid, scenario, tuple(refs), score=score, metadata=metadata)
