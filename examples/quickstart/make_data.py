"""Make the bundled example's recorded data: inference records and reports of a few agent sessions.

Run from the repository root: ``python examples/quickstart/make_data.py`` rewrites
``examples/quickstart/records.jsonl``. The output is deterministic (fixed clock, fixed ids), so
the committed file only changes when this script does.

The sessions cover what trajectory linking must handle: multi-turn conversations, tool calls
and their results, a retry of the same request (a sibling, not a child), a conversation that
branches after its first reply, a session whose tools change half-way (a new trajectory), and
an exchange the engine aborted.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from reef.core.records import InferenceRecord, Record, Report, dumps

OUT = Path(__file__).with_name("records.jsonl")
T0 = 1_767_225_600.0  # 2026-01-01T00:00:00Z: a fixed clock keeps the file stable

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_docs",
        "description": "Search the product documentation",
        "parameters": {
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
    },
}


class Recorder:
    """Plays the inference service: turns requests and replies into records."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.clock = T0

    def call(
        self,
        scenario: str,
        messages: list[dict[str, Any]],
        reply: dict[str, Any],
        *,
        tools: list[dict[str, Any]] | None = None,
        artifact: str = "art-0",
        tags: dict[str, str] | None = None,
        finish_reason: str | None = None,
    ) -> InferenceRecord:
        self.clock += 1.5
        n = sum(1 for r in self.records if isinstance(r, InferenceRecord))
        request: dict[str, Any] = {"model": "reef-demo", "messages": [dict(m) for m in messages]}
        if tools:
            request["tools"] = tools
        reason = finish_reason or ("tool_calls" if reply.get("tool_calls") else "stop")
        record = InferenceRecord(
            id=f"inf-{n:04d}",
            scenario=scenario,
            request=request,
            response={
                "id": f"chatcmpl-{n:04d}",
                "object": "chat.completion",
                "model": "reef-demo",
                "choices": [{"index": 0, "message": reply, "finish_reason": reason}],
                "usage": {"prompt_tokens": 20 + 7 * len(messages), "completion_tokens": 12},
            },
            artifact_id=artifact,
            tags=tags or {},
            started_at=self.clock,
            ended_at=self.clock + 0.8,
        )
        self.records.append(record)
        return record

    def report(self, scenario: str, ends: list[InferenceRecord], score: float, note: str) -> None:
        self.clock += 0.5
        n = sum(1 for r in self.records if isinstance(r, Report))
        self.records.append(
            Report(
                id=f"rep-{n:04d}",
                scenario=scenario,
                references=tuple(r.id for r in ends),
                score=score,
                feedback=note,
                metadata={"grader": "example"},
                created_at=self.clock,
            )
        )


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def weather_session(rec: Recorder, city: str, temp: int, score: float) -> None:
    system = {"role": "system", "content": "You are a concise travel assistant."}
    user = {"role": "user", "content": f"Do I need a coat in {city} today?"}
    msgs = [system, user]
    call = tool_call(f"call-{city.lower()}", "get_weather", {"city": city})
    rec.call("travel", msgs, call, tools=[WEATHER_TOOL], tags={"team": "travel"})
    msgs = [
        *msgs,
        call,
        {
            "role": "tool",
            "tool_call_id": f"call-{city.lower()}",
            "content": json.dumps({"temp_c": temp}),
        },
    ]
    answer = assistant("Yes, take a coat." if temp < 12 else "No coat needed.")
    last = rec.call("travel", msgs, answer, tools=[WEATHER_TOOL], tags={"team": "travel"})
    rec.report("travel", [last], score, "checked against the forecast")


def build() -> list[Record]:
    rec = Recorder()
    weather_session(rec, "Oslo", 4, 1.0)
    weather_session(rec, "Lisbon", 22, 1.0)

    # A retry: the first attempt timed out on the client; both calls have the same request and
    # are siblings. The second attempt continues.
    system = {"role": "system", "content": "You answer questions about Reef's documentation."}
    user = {"role": "user", "content": "How do I block a plugin?"}
    first = tool_call("call-s1", "search_docs", {"query": "block plugin"})
    rec.call("support", [system, user], first, tools=[SEARCH_TOOL])
    retry = tool_call("call-s2", "search_docs", {"query": "REEF_BLOCK_PLUGINS"})
    rec.call("support", [system, user], retry, tools=[SEARCH_TOOL])
    msgs = [
        system,
        user,
        retry,
        {"role": "tool", "tool_call_id": "call-s2", "content": "Set REEF_BLOCK_PLUGINS=name."},
    ]
    end = rec.call(
        "support", msgs, assistant("Set REEF_BLOCK_PLUGINS to its name."), tools=[SEARCH_TOOL]
    )
    rec.report("support", [end], 0.8, "right, but could cite the page")

    # A branch: after the first reply the user asked two different follow-ups (two trajectories
    # sharing their first call). One report scores both ends.
    user2 = {"role": "user", "content": "What is a record set?"}
    reply = assistant("A group of records that train together.")
    root = rec.call("support", [system, user2], reply, tools=[SEARCH_TOOL])
    del root
    a = rec.call(
        "support",
        [system, user2, reply, {"role": "user", "content": "Example?"}],
        assistant("A report and the calls it scores."),
        tools=[SEARCH_TOOL],
    )
    b = rec.call(
        "support",
        [system, user2, reply, {"role": "user", "content": "Who forms it?"}],
        assistant("The record-to-sample stage."),
        tools=[SEARCH_TOOL],
    )
    rec.report("support", [a, b], 0.5, "both answers are thin")

    # Tools change half-way: the second call cannot link to the first, so it starts a trajectory.
    user3 = {"role": "user", "content": "Summarise the changelog."}
    first3 = assistant("Which package?")
    rec.call("support", [system, user3], first3, tools=[SEARCH_TOOL])
    rec.call(
        "support",
        [system, user3, first3, {"role": "user", "content": "reef-core"}],
        assistant("Foundations: plugins, records, stores."),
    )

    # An engine abort: recorded as it happened; a record set holding it never trains.
    user4 = {"role": "user", "content": "Write a long poem about queues."}
    aborted = rec.call(
        "support",
        [system, user4],
        assistant("Queues, queues"),
        tools=[SEARCH_TOOL],
        finish_reason="abort",
    )
    rec.report("support", [aborted], -1.0, "cut off")
    return rec.records


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else OUT
    out.write_text("".join(dumps(r) + "\n" for r in build()), encoding="utf-8")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
