"""Parent links between inference calls: the longest-prefix rule (P-SET-2).

An agent resends its whole conversation on every call, so a call's parent is the earlier call
whose request its own request extends. Precisely (``docs/trajectories.md``):

- two calls can link only when their API format and their tools (normalised JSON, order kept)
  are equal;
- a request is its list of input messages, each reduced by :func:`comparable_message`;
  sampling parameters do not count;
- the parent is the earlier call whose request is the longest *proper* prefix of the call's
  request (a retry with an identical request is a sibling, never a child);
- among several earlier calls with that prefix (retries), the parent is the one whose recorded
  reply is the message that follows the prefix in the child's request; when none or several
  replies match, the most recent of those calls;
- a Responses call chained by ``previous_response_id`` holds only its own turn: its prefixes
  start from the response it continues instead of from an empty request, and that call is its
  parent unless a sibling of its own chain is a longer prefix.

Requests and replies are compared as chat messages, whatever their format
(:mod:`reef.core.api_formats`), so one rule serves every format.

Cost. Every request prefix has a *key*: a chained BLAKE2b hash, ``key(m[:0])`` over the format
and tools, ``key(m[:k+1]) = H(key(m[:k]), m[k])``. Linking a call hashes each of its messages
once and probes two dicts at most once per prefix length, so its work is proportional to its
own length and never to the number of calls stored. The index keeps only keys and ids, never
bodies, so it can be rebuilt from :class:`LinkEntry` values after the bodies were evicted.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import attrs

from reef.core.api_formats import previous_response_id
from reef.core.records import JSON, InferenceRecord

#: Size in bytes of a prefix key's digest (written as twice as many hex digits).
KEY_BYTES = 16


@attrs.frozen
class LinkEntry:
    """What the index needs to know of one linked call, without its body.

    Storage persists one entry per inference record so that a restarted process rebuilds the
    index with :meth:`TrajectoryIndex.restore`, in store order, even when bodies were evicted.

    :ivar call_id: the inference record's id.
    :ivar parent_id: the id of its parent call, ``None`` for a root.
    :ivar request_key: the key of the call's full request (format, tools, every message).
    :ivar reply_keys: for each choice of the response, the key of the request extended by that
        choice's reply message; a later call looks them up to break ties between retries.
    """

    call_id: str
    parent_id: str | None
    request_key: str
    reply_keys: tuple[str, ...]


def comparable_message(message: Any) -> Any:
    """The part of a chat message that counts when requests are compared.

    Only ``role``, ``content``, ``tool_calls``, ``tool_call_id`` and ``name`` count; a missing
    value, ``None``, an empty string and an empty list all mean "absent", so that an assistant
    reply as the engine returned it (``"content": null``, ``"refusal": null``) equals the same
    message as the client sends it back. Each tool call keeps its ``id``, ``type`` (default
    ``"function"``) and its function's ``name`` and ``arguments`` (the arguments text is
    compared as is). A value that is not a JSON object is kept unchanged.
    """
    if not isinstance(message, Mapping):
        return message
    normal: JSON = {}
    for name in ("role", "content", "tool_call_id", "name"):
        value = message.get(name)
        if value not in (None, "", []):
            normal[name] = value
    tool_calls = message.get("tool_calls")
    if isinstance(tool_calls, list) and tool_calls:
        normal["tool_calls"] = [_normalise_tool_call(call) for call in tool_calls]
    elif tool_calls not in (None, []):
        normal["tool_calls"] = tool_calls
    return normal


def _normalise_tool_call(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return call
    function = call.get("function")
    if isinstance(function, Mapping):
        function = {"name": function.get("name"), "arguments": function.get("arguments")}
    return {"id": call.get("id"), "type": call.get("type") or "function", "function": function}


def _canonical(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def _hash(*parts: bytes) -> str:
    digest = hashlib.blake2b(digest_size=KEY_BYTES)
    for part in parts:
        # Length-prefixed, so that no two different sequences of parts hash alike by framing.
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()


def root_key(api_format: str, tools: Sequence[Any]) -> str:
    """The key of an empty request: what two calls must share before any message counts."""
    return _hash(b"reef.request.v1", _canonical([api_format, list(tools)]))


def extend_key(key: str, message: Any) -> str:
    """The key of the request ``key`` names, extended by ``message`` (normalised here)."""
    return _hash(key.encode(), _canonical(comparable_message(message)))


def chain_key(api_format: str, tools: Sequence[Any], previous_id: str) -> str:
    """The key a chained call's prefixes start from: the conversation of ``previous_id``
    (which only that call's id names), with the call's tools."""
    return _hash(b"reef.chain.v1", previous_id.encode(), _canonical([api_format, list(tools)]))


def prefix_keys(record: InferenceRecord) -> list[str]:
    """``keys[k]`` is the key of the record's first ``k`` messages (``len(messages) + 1`` keys);
    a chained call's keys start from :func:`chain_key`."""
    previous = previous_response_id(record.api_format, record.request)
    if previous is None:
        keys = [root_key(record.api_format, record.tools)]
    else:
        keys = [chain_key(record.api_format, record.tools, previous)]
    for message in record.messages:
        keys.append(extend_key(keys[-1], message))
    return keys


class TrajectoryIndex:
    """Links inference calls into trajectories and answers questions about the links.

    Calls arrive in store order, through :meth:`add` (a new call, linked here) or
    :meth:`restore` (a call linked before, rebuilt from its :class:`LinkEntry`). Both give the
    same answers. Not thread-safe: one owner (the trainer, or admission under its lock).

    Every method that takes a call id raises :class:`KeyError` with the id when it is not in
    the index.
    """

    def __init__(self) -> None:
        self._parent: dict[str, str | None] = {}
        self._children: dict[str, list[str]] = {}
        # Calls by the key of their full request, and by the key of request + one reply,
        # each list in store order (its last item is the most recent).
        self._by_request: dict[str, list[str]] = {}
        self._by_reply: dict[str, list[str]] = {}
        self._probes = 0
        # The entries inserted inside a :meth:`tentative` block, in order; None outside one.
        self._journal: list[LinkEntry] | None = None

    # -- linking --------------------------------------------------------------------------

    def add(self, record: InferenceRecord) -> LinkEntry:
        """Link ``record``, a call stored after every call already in the index.

        Cost: one hash per message and per choice, at most two dict probes per message:
        proportional to the call's length, independent of the number of calls stored.

        :returns: the entry to persist with the record.
        :raises ValueError: when a call with this id is already in the index.
        """
        self._check_new(record.id)
        keys = prefix_keys(record)
        self._probes += len(keys)
        parent_id = self._find_parent(keys)
        previous = previous_response_id(record.api_format, record.request)
        if parent_id is None and previous is not None and previous in self._parent:
            # Chained: the call continues the response it names, whose body it does not repeat.
            parent_id = previous
        reply_keys = tuple(extend_key(keys[-1], reply) for reply in record.reply_messages)
        self._probes += len(reply_keys)
        entry = LinkEntry(record.id, parent_id, keys[-1], reply_keys)
        self._insert(entry)
        return entry

    def restore(self, entry: LinkEntry) -> None:
        """Re-add a call linked before, from its stored entry (in store order, no body).

        Cost: proportional to the number of the call's choices.

        :raises ValueError: when the call is already in the index.
        :raises KeyError: when its parent is not (entries must come in store order).
        """
        self._check_new(entry.call_id)
        if entry.parent_id is not None and entry.parent_id not in self._parent:
            raise KeyError(entry.parent_id)
        self._insert(entry)

    def _check_new(self, call_id: str) -> None:
        if call_id in self._parent:
            raise ValueError(f"call {call_id!r} is already in the trajectory index")

    def _find_parent(self, keys: list[str]) -> str | None:
        # keys[-1] is the call's own request: a proper prefix is strictly shorter.
        for k in range(len(keys) - 2, -1, -1):
            self._probes += 1
            candidates = self._by_request.get(keys[k])
            if not candidates:
                continue
            if len(candidates) == 1:
                return candidates[0]
            # Retries of one prefix: prefer the one whose reply this request continues with.
            # A reply key chains from the candidate's request key, so a match is a candidate.
            self._probes += 1
            matching = self._by_reply.get(keys[k + 1], ())
            # Several matching replies: the most recent of those; none: the most recent retry.
            return matching[-1] if matching else candidates[-1]
        return None

    @contextlib.contextmanager
    def tentative(self) -> Iterator[None]:
        """A block whose additions are undone when it raises: the index is then exactly as it
        was before the block (a writer whose transaction failed keeps its index without
        rebuilding it). Cost of the undo: proportional to what the block added.

        :raises ValueError: when a tentative block is open already.
        """
        if self._journal is not None:
            raise ValueError("a tentative block of this trajectory index is open already")
        self._journal = []
        try:
            yield
        except BaseException:
            self._undo(self._journal)
            raise
        finally:
            self._journal = None

    def _undo(self, entries: list[LinkEntry]) -> None:
        # Newest first: each entry is then the last item of every list that holds it.
        for entry in reversed(entries):
            del self._parent[entry.call_id]
            if entry.parent_id is not None:
                _pop_last(self._children, entry.parent_id, entry.call_id)
            _pop_last(self._by_request, entry.request_key, entry.call_id)
            for reply_key in dict.fromkeys(entry.reply_keys):
                _pop_last(self._by_reply, reply_key, entry.call_id)

    def _insert(self, entry: LinkEntry) -> None:
        if self._journal is not None:
            self._journal.append(entry)
        self._parent[entry.call_id] = entry.parent_id
        if entry.parent_id is not None:
            self._children.setdefault(entry.parent_id, []).append(entry.call_id)
        self._by_request.setdefault(entry.request_key, []).append(entry.call_id)
        # Two choices with the same reply count once: they are one candidate's reply.
        for reply_key in dict.fromkeys(entry.reply_keys):
            self._by_reply.setdefault(reply_key, []).append(entry.call_id)

    # -- questions ------------------------------------------------------------------------

    def _check_known(self, call_id: str) -> None:
        if call_id not in self._parent:
            raise KeyError(call_id)

    @property
    def probes(self) -> int:
        """Messages hashed and dict probes made while linking, so far.

        A measure of linking work that does not depend on timing: tests and benchmarks check
        that it grows with the length of the calls added, never with the number stored.
        """
        return self._probes

    def parent(self, call_id: str) -> str | None:
        """The call's parent, ``None`` for a root. Cost: O(1)."""
        return self._parent[call_id]

    def children(self, call_id: str) -> tuple[str, ...]:
        """The calls whose parent is ``call_id``, in store order. Cost: O(children)."""
        self._check_known(call_id)
        return tuple(self._children.get(call_id, ()))

    def trajectory(self, call_id: str) -> tuple[str, ...]:
        """The calls from the root of ``call_id``'s trajectory to it. Cost: O(depth)."""
        path = [call_id]
        parent = self._parent[call_id]
        while parent is not None:
            path.append(parent)
            parent = self._parent[parent]
        path.reverse()
        return tuple(path)

    def last_calls(self, call_id: str) -> tuple[str, ...]:
        """The last calls of the trajectories through ``call_id``: its descendant leaves.

        The call itself when it has no child. In depth-first store order.
        Cost: O(size of the call's subtree).
        """
        self._check_known(call_id)
        leaves: list[str] = []
        stack = [call_id]
        while stack:
            current = stack.pop()
            children = self._children.get(current)
            if children:
                stack.extend(reversed(children))
            else:
                leaves.append(current)
        return tuple(leaves)

    def is_last_call(self, call_id: str) -> bool:
        """True when no call has ``call_id`` as its parent (yet). Cost: O(1)."""
        self._check_known(call_id)
        return call_id not in self._children

    def is_inside(self, call_id: str, other_id: str) -> bool:
        """True when ``call_id`` is a proper ancestor of ``other_id``.

        That is, ``call_id`` lies inside ``other_id``'s trajectory without being its last call.
        A report that references such a call references an inner call. Cost: O(depth of other).
        """
        self._check_known(call_id)
        parent = self._parent[other_id]
        while parent is not None:
            if parent == call_id:
                return True
            parent = self._parent[parent]
        return False

    def __contains__(self, call_id: object) -> bool:
        return call_id in self._parent

    def __len__(self) -> int:
        return len(self._parent)

    def __iter__(self) -> Iterator[str]:
        """The call ids, in store order."""
        return iter(self._parent)


def _pop_last(lists: dict[str, list[str]], key: str, call_id: str) -> None:
    """Take ``call_id``, the newest, off ``lists[key]``; an emptied list goes (an absent key
    and an empty list must not differ: :meth:`TrajectoryIndex.is_last_call`)."""
    calls = lists[key]
    assert calls[-1] == call_id  # undone newest first
    calls.pop()
    if not calls:
        del lists[key]
