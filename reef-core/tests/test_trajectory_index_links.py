"""The trajectory index against a literal, brute-force reading of the longest-prefix rule.

rule: P-SET-2 (a call's parent is the earlier call with the same API format and tools whose
request is the longest prefix of its own), with the decisions of
docs/decisions.md#linking-calls-into-trajectories: requests compared as normalised messages,
proper prefixes only (a retry is a sibling), ties between retries broken by the reply the child
continues with, else the most recent. Every API format: the random calls are written in chat
messages and recorded in their format's own shape (Responses items, Messages blocks), and the
reference compares the chat messages the test wrote, never Reef's reading of the bodies; a
Responses call may be chained by ``previous_response_id`` (docs/api-formats.md#linking).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from reef.core.records import CHAT_COMPLETIONS, MESSAGES, RESPONSES, InferenceRecord
from reef.core.trajectory_index import LinkEntry, TrajectoryIndex, comparable_message

#: What the test wrote of each record, by id: its chat messages, chat tools, chat replies, and
#: the response it continues (a chained Responses call).
WRITTEN: dict[str, tuple[list[Any], list[Any], list[Any], str | None]] = {}

# -- the reference ----------------------------------------------------------------------------


def _canon(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _request(record: InferenceRecord) -> list[str]:
    return [_canon(comparable_message(m)) for m in WRITTEN[record.id][0]]


def _anchor(record: InferenceRecord) -> str:
    """What two calls must share before any message counts: format and tools, and for a
    chained call the response it continues."""
    _, tools, _, previous = WRITTEN[record.id]
    return _canon([record.api_format, tools, previous])


def reference_parents(records: Sequence[InferenceRecord]) -> dict[str, str | None]:
    """The rule read literally, in O(n^2): compare each call with every earlier call."""
    parents: dict[str, str | None] = {}
    for i, record in enumerate(records):
        request = _request(record)
        best = -1
        candidates: list[InferenceRecord] = []
        for earlier in records[:i]:
            if _anchor(earlier) != _anchor(record):
                continue
            prefix = _request(earlier)
            if len(prefix) >= len(request) or request[: len(prefix)] != prefix:
                continue
            if len(prefix) > best:
                best, candidates = len(prefix), [earlier]
            elif len(prefix) == best:
                candidates.append(earlier)
        if not candidates:
            # A chained call with no sibling before it continues the response it names.
            parents[record.id] = WRITTEN[record.id][3]
            continue
        following = request[best]
        matching = [
            c
            for c in candidates
            if any(_canon(comparable_message(reply)) == following for reply in WRITTEN[c.id][2])
        ]
        parents[record.id] = (matching[-1] if matching else candidates[-1]).id
    return parents


def reference_answers(
    parents: dict[str, str | None], ids: Sequence[str]
) -> tuple[dict[str, Any], ...]:
    """Children, trajectories, last calls and inside-ness, from the parent map alone."""
    children = {i: tuple(c for c in ids if parents[c] == i) for i in ids}

    def path(call: str) -> tuple[str, ...]:
        up: list[str] = []
        current: str | None = call
        while current is not None:
            up.append(current)
            current = parents[current]
        return tuple(reversed(up))

    trajectories = {i: path(i) for i in ids}
    leaves = {i: frozenset(c for c in ids if not children[c] and i in trajectories[c]) for i in ids}
    return children, trajectories, leaves


# -- random call trees ------------------------------------------------------------------------

TOOLS = [
    [],
    [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}],
    [
        {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}},
        {"type": "function", "function": {"name": "cat", "parameters": {"type": "object"}}},
    ],
]
FORMATS = [CHAT_COMPLETIONS, RESPONSES, MESSAGES]
WORDS = ["a", "b", "c"]


def assistant_message(draw: st.DrawFn) -> dict[str, Any]:
    """An assistant reply as an engine returns it: sometimes a tool call, null fields."""
    if draw(st.booleans()):
        call_id = draw(st.sampled_from(["c1", "c2"]))
        return {
            "role": "assistant",
            "content": None,
            "refusal": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "ls", "arguments": draw(st.sampled_from(["{}", "[1]"]))},
                }
            ],
        }
    return {"role": "assistant", "content": draw(st.sampled_from(WORDS)), "refusal": None}


def as_client_sends(message: dict[str, Any]) -> dict[str, Any]:
    """The same message as a client sends it back: null fields dropped."""
    return {k: v for k, v in message.items() if v is not None}


def follow_up(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "tool"]))
    if role == "tool":
        return {"role": "tool", "tool_call_id": "c1", "content": draw(st.sampled_from(WORDS))}
    return {"role": "user", "content": draw(st.sampled_from(WORDS))}


def make_record(
    i: int,
    messages: list[dict[str, Any]],
    tools: list[Any],
    api_format: str,
    replies: list[dict[str, Any]],
    previous: str | None = None,
) -> InferenceRecord:
    """A record of ``api_format`` whose request is ``messages`` with ``tools`` and whose
    replies are ``replies`` (chat messages), written in the format's own shape."""
    WRITTEN[f"r{i}"] = (messages, tools, replies, previous)
    request: dict[str, Any] = {"model": "m", "temperature": i % 3}
    if api_format == RESPONSES:
        request["input"] = [item for m in messages for item in responses_items(m)]
        if previous is not None:
            request["previous_response_id"] = previous
        if tools:
            request["tools"] = [{"type": "function", **t["function"]} for t in tools]
        output = responses_items(replies[0]) if replies else []
        response: dict[str, Any] = {"object": "response", "output": output}
    elif api_format == MESSAGES:
        system = messages[:1] if messages and messages[0]["role"] == "system" else []
        if system:
            request["system"] = system[0]["content"]
        request["messages"] = [messages_turn(m) for m in messages[len(system) :]]
        if tools:
            request["tools"] = [
                {"name": t["function"]["name"], "input_schema": t["function"]["parameters"]}
                for t in tools
            ]
        content = messages_turn(replies[0])["content"] if replies else []
        response = {"type": "message", "content": content}
    else:
        request["messages"] = messages
        if tools:
            request["tools"] = tools
        response = {
            "choices": [
                {"index": n, "message": reply, "finish_reason": "stop"}
                for n, reply in enumerate(replies)
            ]
        }
    return InferenceRecord(
        id=f"r{i}", scenario="s", request=request, response=response, api_format=api_format
    )


def responses_items(message: dict[str, Any]) -> list[Any]:
    """A chat message as the Responses items an agent sends."""
    role = message["role"]
    if role == "tool":
        output = {"type": "function_call_output", "call_id": message["tool_call_id"]}
        return [{**output, "output": message["content"]}]
    if role != "assistant":
        return [{"role": role, "content": message["content"]}]
    items: list[Any] = []
    if message.get("content"):
        text = {"type": "output_text", "text": message["content"], "annotations": []}
        items.append({"type": "message", "role": "assistant", "content": [text]})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        item = {"type": "function_call", "call_id": call["id"], "name": function["name"]}
        items.append({**item, "arguments": function["arguments"]})
    return items


def messages_turn(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as a Messages turn: tool results are user turns of ``tool_result``
    blocks, tool calls ``tool_use`` blocks."""
    role = message["role"]
    if role == "tool":
        result = {
            "type": "tool_result",
            "tool_use_id": message["tool_call_id"],
            "content": message["content"],
        }
        return {"role": "user", "content": [result]}
    if role != "assistant":
        return {"role": role, "content": message["content"]}
    blocks: list[Any] = []
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or []:
        function = call["function"]
        block = {"type": "tool_use", "id": call["id"], "name": function["name"]}
        blocks.append({**block, "input": json.loads(function["arguments"])})
    return {"role": "assistant", "content": blocks}


@st.composite
def call_trees(draw: st.DrawFn, max_calls: int = 30) -> list[InferenceRecord]:
    """Calls of a few agents: new sessions, continuations, branches, retries, changes."""
    records: list[InferenceRecord] = []
    for i in range(draw(st.integers(1, max_calls))):
        kinds = ["root"] if not records else ["root", "continue", "retry", "branch", "change"]
        if any(r.api_format == RESPONSES for r in records):
            kinds.append("chain")
        kind = draw(st.sampled_from(kinds))
        tools = draw(st.sampled_from(TOOLS))
        api_format = draw(st.sampled_from(FORMATS)) if kind == "root" else CHAT_COMPLETIONS
        messages: list[dict[str, Any]]
        previous: str | None = None
        if kind == "root":
            messages = [{"role": "system", "content": draw(st.sampled_from(WORDS))}]
            messages += [follow_up(draw) for _ in range(draw(st.integers(0, 2)))]
        elif kind == "chain":
            # Only the new turn, after the response it continues (or beside a sibling).
            base = draw(st.sampled_from([r for r in records if r.api_format == RESPONSES]))
            previous, api_format, tools = base.id, RESPONSES, WRITTEN[base.id][1]
            messages = [follow_up(draw) for _ in range(draw(st.integers(1, 3)))]
        else:
            base = draw(st.sampled_from(records))
            messages, tools, _, previous = WRITTEN[base.id]
            api_format = base.api_format
            messages = list(messages)
            if kind == "continue":
                if messages and messages[-1]["role"] == "assistant":
                    # Two assistant turns in a row are one turn in the Responses format
                    # (docs/api-formats.md#linking): a turn of the user's comes between.
                    messages.append(follow_up(draw))
                # The reply of one of its choices (as a client resends it), or another one.
                replies = WRITTEN[base.id][2]
                reply = (
                    as_client_sends(draw(st.sampled_from(replies)))
                    if replies and draw(st.booleans())
                    else assistant_message(draw)
                )
                messages += [reply] + [follow_up(draw) for _ in range(draw(st.integers(1, 2)))]
            elif kind == "branch":
                messages = messages[: draw(st.integers(0, len(messages)))]
                messages += [follow_up(draw) for _ in range(draw(st.integers(0, 2)))]
            elif kind == "change":
                if draw(st.booleans()):
                    tools = draw(st.sampled_from(TOOLS))
                else:
                    api_format = draw(st.sampled_from(FORMATS))
                    # Only a Responses call continues a response by its id.
                    previous = previous if api_format == RESPONSES else None
                messages += [follow_up(draw)]
            # "retry": the identical request.
        # Responses and Messages answer once.
        most = 2 if api_format == CHAT_COMPLETIONS else 1
        replies = [assistant_message(draw) for _ in range(draw(st.integers(0, most)))]
        records.append(make_record(i, messages, list(tools), api_format, replies, previous))
    return records


def linked(records: Sequence[InferenceRecord]) -> tuple[TrajectoryIndex, list[LinkEntry]]:
    index = TrajectoryIndex()
    return index, [index.add(r) for r in records]


def check_answers(index: TrajectoryIndex, records: Sequence[InferenceRecord]) -> None:
    ids = [r.id for r in records]
    parents = reference_parents(records)
    children, trajectories, leaves = reference_answers(parents, ids)
    assert len(index) == len(ids)
    assert list(index) == ids
    for i in ids:
        assert i in index
        assert index.parent(i) == parents[i], i
        assert index.children(i) == children[i]
        assert index.trajectory(i) == trajectories[i]
        assert frozenset(index.last_calls(i)) == leaves[i]
        assert len(index.last_calls(i)) == len(leaves[i])
        assert index.is_last_call(i) == (not children[i])
        for j in ids:
            assert index.is_inside(i, j) == (i in trajectories[j][:-1])


# -- properties -------------------------------------------------------------------------------

PROPERTY = settings(max_examples=150)


@PROPERTY
@given(call_trees())
def test_links_match_the_brute_force_reference(records: list[InferenceRecord]) -> None:
    """rule: P-SET-2, on random trees with branches, retries, tool and format changes."""
    index, _ = linked(records)
    check_answers(index, records)


@PROPERTY
@given(call_trees())
def test_restore_from_entries_answers_like_add(records: list[InferenceRecord]) -> None:
    """rule: P-SET-2; an index rebuilt from stored entries (no bodies) links later calls alike."""
    split = len(records) // 2
    first, entries = linked(records[:split])
    rebuilt = TrajectoryIndex()
    for entry in entries:
        rebuilt.restore(entry)
    for record in records[split:]:
        assert rebuilt.add(record) == first.add(record)
    check_answers(rebuilt, records)


class _Abandoned(Exception):
    pass


def _abandoned(index: TrajectoryIndex, work: Callable[[], object]) -> None:
    """Run ``work`` in a tentative block of ``index`` that then raises."""

    def block() -> None:
        with index.tentative():
            work()
            raise _Abandoned

    with pytest.raises(_Abandoned):
        block()


@PROPERTY
@given(call_trees(), st.data())
def test_a_tentative_block_that_raises_leaves_the_index_as_it_was(
    records: list[InferenceRecord], data: st.DataObject
) -> None:
    """rule: P-SET-2; calls added (or restored) in a failed block are gone: the index answers,
    and links later calls, as one that never saw them."""
    start = data.draw(st.integers(0, len(records)), label="start")
    end = data.draw(st.integers(start, len(records)), label="end")
    kept, dropped, later = records[:start], records[start:end], records[end:]
    index, _ = linked(kept)
    never, _ = linked(kept)
    scratch, _ = linked(kept)
    entries = [scratch.add(record) for record in dropped]

    def add_and_restore() -> None:
        for n, (record, entry) in enumerate(zip(dropped, entries, strict=True)):
            if n % 2:
                index.restore(entry)  # as a catch-up restores what another writer stored
            else:
                assert index.add(record) == entry

    _abandoned(index, add_and_restore)
    assert list(index) == [r.id for r in kept]
    for record in later:
        assert index.add(record) == never.add(record)
    for call_id in never:
        assert index.parent(call_id) == never.parent(call_id)
        assert index.children(call_id) == never.children(call_id)
        assert index.is_last_call(call_id) == never.is_last_call(call_id)
    with index.tentative():  # a block that ends normally keeps what it added
        for record in dropped:
            index.add(record)
    assert len(index) == len(records)


def test_tentative_blocks_do_not_nest() -> None:
    index = TrajectoryIndex()
    with index.tentative(), pytest.raises(ValueError, match="open already"), index.tentative():
        pass


# -- worked cases -----------------------------------------------------------------------------

SYSTEM = {"role": "system", "content": "be brief"}
ASK = {"role": "user", "content": "list files"}
CALL_LS = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}],
}
LS_RESULT = {"role": "tool", "tool_call_id": "t1", "content": "a.txt"}
DONE = {"role": "assistant", "content": "one file: a.txt"}


def test_a_retry_is_a_sibling_and_the_child_follows_the_reply_it_continues() -> None:
    """rule: P-SET-2; decisions: proper prefix, ties between retries."""
    first = make_record(0, [SYSTEM, ASK], [], CHAT_COMPLETIONS, [CALL_LS])
    retry = make_record(1, [SYSTEM, ASK], [], CHAT_COMPLETIONS, [DONE])
    child = make_record(2, [SYSTEM, ASK, CALL_LS, LS_RESULT], [], CHAT_COMPLETIONS, [DONE])
    index, _ = linked([first, retry, child])
    assert index.parent("r1") is None  # identical request: sibling, not child
    assert index.parent("r2") == "r0"  # not the most recent retry: its reply is what r2 continues
    assert index.trajectory("r2") == ("r0", "r2")
    assert index.last_calls("r0") == ("r2",)
    assert index.is_inside("r0", "r2")
    assert not index.is_inside("r1", "r2")
    assert not index.is_inside("r2", "r2")


def test_an_undone_retry_no_longer_breaks_the_tie_between_retries() -> None:
    """rule: P-SET-2; a retry added in a failed tentative block is forgotten in the reply
    tie-break too: the child goes to the kept retry whose reply it continues."""
    first = make_record(0, [SYSTEM, ASK], [], CHAT_COMPLETIONS, [CALL_LS])
    retry = make_record(1, [SYSTEM, ASK], [], CHAT_COMPLETIONS, [DONE])
    undone = make_record(2, [SYSTEM, ASK], [], CHAT_COMPLETIONS, [CALL_LS])
    child = make_record(3, [SYSTEM, ASK, CALL_LS, LS_RESULT], [], CHAT_COMPLETIONS, [DONE])
    index, _ = linked([first, retry])
    _abandoned(index, lambda: index.add(undone))
    assert index.add(child).parent_id == "r0"


def test_ambiguous_retries_go_to_the_most_recent() -> None:
    """rule: P-SET-2; decision on ties: none or several matching replies -> the most recent."""
    calls = [make_record(i, [SYSTEM, ASK], [], CHAT_COMPLETIONS, [CALL_LS]) for i in range(3)]
    child = make_record(3, [SYSTEM, ASK, CALL_LS, LS_RESULT], [], CHAT_COMPLETIONS, [])
    other = make_record(4, [SYSTEM, ASK, DONE, ASK], [], CHAT_COMPLETIONS, [])
    index, _ = linked([*calls, child, other])
    assert index.parent("r3") == "r2"
    assert index.parent("r4") == "r2"
    assert index.children("r2") == ("r3", "r4")
    assert index.last_calls("r2") == ("r3", "r4")


def test_several_matching_retries_go_to_the_most_recent_match() -> None:
    """rule: P-SET-2; ties: a retry whose reply the child does not continue never wins."""
    matching = [make_record(i, [SYSTEM, ASK], [], CHAT_COMPLETIONS, [CALL_LS]) for i in range(2)]
    other = make_record(2, [SYSTEM, ASK], [], CHAT_COMPLETIONS, [DONE])
    child = make_record(3, [SYSTEM, ASK, CALL_LS, LS_RESULT], [], CHAT_COMPLETIONS, [])
    index, _ = linked([*matching, other, child])
    assert index.parent("r3") == "r1"


def test_tools_and_format_must_be_equal() -> None:
    """rule: P-SET-2; requests: the same prefix under other tools or format does not link."""
    root = make_record(0, [SYSTEM, ASK], TOOLS[1], CHAT_COMPLETIONS, [CALL_LS])
    other_tools = make_record(1, [SYSTEM, ASK, CALL_LS], TOOLS[2], CHAT_COMPLETIONS, [])
    reordered = make_record(2, [SYSTEM, ASK, CALL_LS], TOOLS[2][::-1], CHAT_COMPLETIONS, [])
    other_format = make_record(3, [SYSTEM, ASK, CALL_LS], TOOLS[1], RESPONSES, [])
    same = make_record(4, [SYSTEM, ASK, CALL_LS], TOOLS[1], CHAT_COMPLETIONS, [])
    index, _ = linked([root, other_tools, reordered, other_format, same])
    assert [index.parent(f"r{i}") for i in range(5)] == [None, None, None, None, "r0"]


def test_sampling_parameters_and_null_fields_do_not_count() -> None:
    """Decision on requests: messages are compared normalised; sampling parameters are ignored."""
    root = make_record(0, [SYSTEM, ASK], [], CHAT_COMPLETIONS, [{**DONE, "refusal": None}])
    child = make_record(
        1, [SYSTEM, ASK, {**DONE, "annotations": []}, ASK], [], CHAT_COMPLETIONS, []
    )
    child.request["temperature"] = 0.9
    child.request["max_tokens"] = 12
    index, _ = linked([root, child])
    assert index.parent("r1") == "r0"
    assert comparable_message({"role": "user", "content": "", "name": None}) == {"role": "user"}


def test_unknown_and_duplicate_ids_are_refused() -> None:
    index, entries = linked([make_record(0, [SYSTEM], [], CHAT_COMPLETIONS, [])])
    for question in (
        index.parent,
        index.children,
        index.trajectory,
        index.last_calls,
        index.is_last_call,
    ):
        with pytest.raises(KeyError, match="nope"):
            question("nope")
    with pytest.raises(KeyError, match="nope"):
        index.is_inside("r0", "nope")
    with pytest.raises(KeyError, match="nope"):
        index.is_inside("nope", "r0")
    with pytest.raises(ValueError, match="r0"):
        index.add(make_record(0, [SYSTEM], [], CHAT_COMPLETIONS, []))
    with pytest.raises(ValueError, match="r0"):
        index.restore(entries[0])
    with pytest.raises(KeyError, match="gone"):
        TrajectoryIndex().restore(LinkEntry("x", "gone", "k", ()))
    assert "nope" not in index
