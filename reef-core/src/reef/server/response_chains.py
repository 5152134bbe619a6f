"""Resolving ``previous_response_id``: the Responses API's server-side conversation state.

A chained Responses call sends only its new turn and names the response it continues. Reef
keeps no conversation store of its own: the records are the state. The whole input of a
response is its request resolved the same way (recursively) and its output is its recorded
response, so :class:`ResponseChains` reads the chain back from the record store and forwards a
complete request. The latest resolutions are kept in memory (a bounded LRU), so a long agent
loop reads one record per call, not the whole chain.

A response stored with ``store: false`` is never resolved: its record is kept to train (like
every call's), and nothing beyond it (``docs/api-formats.md#store-false``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Final

import anyio.to_thread

from reef.core.api_formats import RESPONSES, input_items, previous_response_id, resolved_request
from reef.core.records import JSON, InferenceRecord
from reef.server.errors import ApiError
from reef.storage import RecordStore

__all__ = ["CHAIN_CACHE", "ResponseChains"]

#: The resolutions kept in memory per scenario.
CHAIN_CACHE: Final = 1024


class ResponseChains:
    """The conversations of one scenario's stored responses, by response id.

    :param records: the scenario's record store.
    :param capacity: how many resolved conversations stay in memory.
    """

    def __init__(self, records: RecordStore, capacity: int = CHAIN_CACHE) -> None:
        self.records = records
        self.capacity = capacity
        # Response id -> (its whole input, its output), most recently used last.
        self._known: OrderedDict[str, tuple[list[Any], list[Any]]] = OrderedDict()

    async def complete(self, request: Mapping[str, Any]) -> JSON:
        """``request`` made complete: a chained request with the conversation it continues,
        any other as it is.

        :raises ApiError: 404 naming ``$.previous_response_id`` when the scenario has no such
            response, or it was not stored (``store: false``), or its body was evicted.
        """
        previous = previous_response_id(RESPONSES, request)
        if previous is None:
            return dict(request)
        known = self._known.get(previous)
        if known is None:
            known = await anyio.to_thread.run_sync(self._read, previous)
        self._known.move_to_end(previous)
        return resolved_request(request, *known)

    def remember(self, record: InferenceRecord, complete: Mapping[str, Any]) -> None:
        """Keep what a later call needs to continue ``record`` (whose request, made complete,
        was ``complete``), unless the client asked Reef not to store it."""
        if record.request.get("store") is False or record.response is None:
            return
        self._keep(record.id, input_items(complete), _output(record.response))

    def _keep(
        self, response_id: str, items: list[Any], output: list[Any]
    ) -> tuple[list[Any], list[Any]]:
        self._known[response_id] = (items, output)
        self._known.move_to_end(response_id)
        while len(self._known) > self.capacity:
            self._known.popitem(last=False)
        return items, output

    def _read(self, response_id: str) -> tuple[list[Any], list[Any]]:
        """The conversation of ``response_id`` from the store: the chain walked back to its
        first call (or to a call whose conversation is in memory), then forward."""
        chain: list[InferenceRecord] = []
        start: tuple[list[Any], list[Any]] | None = None
        wanted: str | None = response_id
        while wanted is not None:
            known = self._known.get(wanted)
            if known is not None:
                start = known
                break
            record = self._stored(wanted)
            chain.append(record)
            wanted = previous_response_id(RESPONSES, record.request)
        for record in reversed(chain):
            request: Mapping[str, Any] = record.request
            if start is not None:
                request = resolved_request(record.request, *start)
            assert record.response is not None
            start = self._keep(record.id, input_items(request), _output(record.response))
        assert start is not None
        return start

    def _stored(self, response_id: str) -> InferenceRecord:
        stored = self.records.get(response_id)
        record = None if stored is None else stored.record
        if stored is not None and record is None:
            raise _not_found(response_id, "its body was evicted from the store")
        if (
            not isinstance(record, InferenceRecord)
            or record.api_format != RESPONSES
            or record.response is None
        ):
            raise _not_found(
                response_id, f"scenario {self.records.scenario!r} has no such response"
            )
        if record.request.get("store") is False:
            raise _not_found(response_id, "it was made with store: false, so it was not kept")
        return record


def _output(response: Mapping[str, Any]) -> list[Any]:
    output = response.get("output")
    return list(output) if isinstance(output, Sequence) and not isinstance(output, str) else []


def _not_found(response_id: str, why: str) -> ApiError:
    return ApiError.one(
        404,
        "not_found",
        "$.previous_response_id",
        f"previous response {response_id!r} cannot be continued: {why}",
    )
