"""The inference routes: OpenAI-compatible chat completions, forwarded and recorded.

A call names its scenario (by header or path), is checked, forwarded to the scenario's engine
and answered; the exchange is written as an :class:`~reef.core.records.InferenceRecord` through
the scenario's ledger before the client sees the end of the answer, so a report posted right
after finds it. A stream is passed on chunk by chunk and recorded whole, or as aborted when the
engine or the client breaks it off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Final

import attrs
from sqlalchemy.exc import OperationalError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from reef.core.records import CHAT_COMPLETIONS, JSON, TAG_HEADER_PREFIX, InferenceRecord
from reef.core.trajectory_index import LinkEntry
from reef.engines.interface import ChunkAssembler, EngineError, as_asked, asking_for_tokens
from reef.engines.publisher import EngineRoute, Publisher
from reef.server.bodies import ChatCompletionRequest, structure, unstructure
from reef.server.errors import ApiError, ErrorBody, ErrorDetail
from reef.server.ledger import ScenarioLedger
from reef.server.metrics import stream_cut
from reef.server.openapi import ApiRoute
from reef.server.request_json import read_json
from reef.server.service import ServedScenario, Service, service_of
from reef.server.tracing import note, recording

__all__ = [
    "RECORD_ID_HEADER",
    "ROUTES",
    "SCENARIO_HEADER",
    "answered_by",
    "call_tags",
    "called_scenario",
    "engine_failure",
    "new_call",
    "note_call",
]

_log = logging.getLogger(__name__)

#: The request header that names the scenario of ``POST /v1/chat/completions``.
SCENARIO_HEADER: Final = "x-reef-scenario"
#: The response header that gives the id of the inference record of a call.
RECORD_ID_HEADER: Final = "x-reef-record-id"


def called_scenario(
    request: Request, service: Service, route: str, *, api_key_header: bool = False
) -> ServedScenario:
    """The scenario an inference call names (its path, else the :data:`SCENARIO_HEADER`),
    once its caller may call it (its token read as :meth:`Service.caller` reads it).
    :raises ApiError: 400 naming none, 401, 403, 404."""
    caller = service.caller(request, api_key_header=api_key_header)
    name = request.path_params.get("scenario")
    field = "scenario"
    if name is None:
        name = request.headers.get(SCENARIO_HEADER)
        field = SCENARIO_HEADER
        if not name:
            raise ApiError.one(
                400,
                "invalid_request",
                SCENARIO_HEADER,
                f"name the scenario in this header, or post to /scenarios/{{scenario}}{route}",
            )
    scenario = service.scenario(name, caller, field)
    caller.require("infer", scenario.name)
    return scenario


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions`` and ``POST /scenarios/{scenario}/v1/chat/completions``."""
    service = service_of(request)
    scenario = called_scenario(request, service, "/v1/chat/completions")
    raw = await read_json(request, service.options.max_body_bytes)
    checked = structure(raw, ChatCompletionRequest, open_keys=True)
    for position, message in enumerate(checked.messages):
        if not isinstance(message.get("role"), str):
            raise ApiError.one(
                400,
                "invalid_request",
                f"$.messages[{position}].role",
                "each message needs a role (a string)",
            )
    record = new_call(request, scenario, raw, f"inf-{uuid.uuid4().hex}")
    # An answer that cannot be recorded is not asked for
    # (docs/service.md#when-the-store-cannot-write).
    await scenario.health.require_writable()
    publisher = service.runtime.publisher(scenario.name)
    route = None if publisher is None else publisher.route()
    forwarded = raw
    if publisher is not None:
        # Routed to the artifact that serves the scenario (the engine's name for it), or to the
        # base model before the first publication, whatever model the agent named.
        forwarded = {**raw, "model": publisher.base_model if route is None else route.model}
    assert scenario.engine is not None  # new_call refuses a scenario without one
    if scenario.engine.returns_tokens:
        # Recorded, so that the component trains what was sampled (docs/engines.md#sampled-tokens).
        forwarded = asking_for_tokens(forwarded)
    if checked.stream:
        return await _stream(service, scenario, record, forwarded, publisher, route, raw)
    try:
        reply = await scenario.engine.complete(forwarded)
    except EngineError as exc:
        return engine_failure(exc, publisher, route)
    # The answer recorded with its id the record's; the client gets it as it asked for it.
    body = {**reply.body, "id": record.id}
    record = attrs.evolve(
        record,
        response=body,
        artifact_id=answered_by(reply.artifact_id, reply.body, publisher, route),
        ended_at=time.time(),
    )
    ledger = service.ledger(scenario)
    linked = await asyncio.wrap_future(ledger.append(record))
    note_call(record, linked, ledger)
    headers = {RECORD_ID_HEADER: record.id}
    shown, trimmed = as_asked(body, raw)
    if reply.content is not None and not trimmed:  # the engine's own bytes, not encoded again
        content = _with_record_id(reply.content.decode(), reply.body.get("id"), record.id)
        if content is not None:
            return Response(content, media_type="application/json", headers=headers)
    return JSONResponse(shown, headers=headers)


def note_call(record: InferenceRecord, linked: LinkEntry, ledger: ScenarioLedger) -> None:
    """The recorded call, on its request's span (:func:`reef.server.tracing.note`): its
    trajectory is the id of the trajectory's first call, and the call it continues."""
    if recording():
        note(
            {
                "reef.scenario": record.scenario,
                "reef.record_id": record.id,
                "reef.api_format": record.api_format,
                "reef.artifact_id": record.artifact_id,
                "reef.trajectory_id": ledger.trajectory_of(record.id),
                "reef.trajectory.parent_id": linked.parent_id,
            }
        )


def new_call(
    request: Request,
    scenario: ServedScenario,
    raw: JSON,
    record_id: str,
    api_format: str = CHAT_COMPLETIONS,
) -> InferenceRecord:
    """The record of a call about to be answered (no response yet), with its tags.

    :raises ApiError: 409 when the scenario has no engine; 400 for a tag header without a name.
    """
    if scenario.engine is None:
        raise ApiError.one(
            409, "no_engine", "scenario", f"scenario {scenario.name!r} has no serving engine"
        )
    return InferenceRecord(
        id=record_id,
        scenario=scenario.name,
        request=raw,
        response=None,
        api_format=api_format,
        tags=call_tags(request),
        started_at=time.time(),
    )


def call_tags(request: Request) -> dict[str, str]:
    """The call's ``x-reef-tag-<name>`` headers, by ``<name>``.

    :raises ApiError: 400 for a tag header without a name.
    """
    tags = {}
    for key, value in request.headers.items():
        if key.startswith(TAG_HEADER_PREFIX):
            name = key[len(TAG_HEADER_PREFIX) :]
            if not name:
                raise ApiError.one(
                    400,
                    "invalid_request",
                    TAG_HEADER_PREFIX,
                    f"a tag header needs a name after {TAG_HEADER_PREFIX!r}: send"
                    f" {TAG_HEADER_PREFIX}<name>: <value>",
                )
            tags[name] = value
    return tags


def _with_record_id(text: str, engine_id: object, record_id: str) -> str | None:
    """The engine's JSON ``text`` (a completion or one stream chunk) with its ``id`` replaced by
    the record's, so the id the agent's client holds (``completion.id``) is the one a report
    names (docs/decisions.md#reports-name-calls-by-the-clients-id). The id is swapped in the
    text where it occurs once, so the engine's bytes are not encoded again; ``None`` when it
    cannot be (the caller encodes the body instead)."""
    if not isinstance(engine_id, str):
        return None
    quoted = json.dumps(engine_id)
    if text.count(quoted) != 1:
        return None
    return text.replace(quoted, json.dumps(record_id))


def answered_by(
    named: str | None, body: JSON, publisher: Publisher | None, route: EngineRoute | None
) -> str | None:
    """The artifact that answered: the one the engine names (``x-reef-artifact-id``), else the
    one Reef routed to as far as the answer confirms it, else the local engine's
    ``system_fingerprint``."""
    if named is not None:
        return named
    if publisher is not None:
        return publisher.answered(route, body)
    fingerprint = body.get("system_fingerprint")
    return fingerprint if isinstance(fingerprint, str) else None


async def _stream(
    service: Service,
    scenario: ServedScenario,
    record: InferenceRecord,
    forwarded: JSON,
    publisher: Publisher | None,
    route: EngineRoute | None,
    asked: JSON,
) -> Response:
    assert scenario.engine is not None
    try:
        started = await scenario.engine.stream(forwarded)
    except EngineError as exc:
        return engine_failure(exc, publisher, route)
    ledger = service.ledger(scenario)

    def finished(assembler: ChunkAssembler, *, aborted: bool) -> InferenceRecord:
        body = assembler.body()
        return attrs.evolve(
            record,
            response=body,
            artifact_id=answered_by(started.artifact_id, body, publisher, route),
            ended_at=time.time(),
            aborted=aborted,
        )

    async def events() -> AsyncIterator[bytes]:
        assembler = ChunkAssembler()
        stored = False
        cut = "client_left"  # unless the engine is found to have cut it
        try:
            async for data in started.events:
                if data == "[DONE]":
                    # Durable before the client sees the end, so a report posted right
                    # after the stream finds the record.
                    done = finished(assembler, aborted=False)
                    linked = await asyncio.wrap_future(ledger.append(done))
                    note_call(done, linked, ledger)
                    stored = True
                    yield b"data: [DONE]\n\n"
                    return
                with contextlib.suppress(ValueError):
                    chunk = json.loads(data)
                    if isinstance(chunk, dict):
                        # As the client gets it: every chunk's id is the record's.
                        relabelled = {**chunk, "id": record.id}
                        assembler.add(relabelled)
                        shown, trimmed = as_asked(relabelled, asked)
                        data = (
                            json.dumps(shown)
                            if trimmed
                            else _with_record_id(data, chunk.get("id"), record.id)
                            or json.dumps(relabelled)
                        )
                yield f"data: {data}\n\n".encode()
            # The engine closed the stream cleanly but never said [DONE]: the answer may be
            # cut short, and the client must hear so as when it breaks off.
            _log.warning("scenario %r: the engine ended a stream without [DONE]", scenario.name)
            cut = "engine_ended"
            yield _error_event("the engine ended the stream without [DONE]")
        except Exception as exc:
            cut = "engine_error"
            if isinstance(exc, OperationalError):
                service.store_failed(exc)
            _log.warning("scenario %r: the engine broke off a stream: %r", scenario.name, exc)
            yield _error_event(f"the engine broke off: {exc}")
        finally:
            if not stored:
                # Broken off (by the engine, or the client left): the exchange is recorded
                # as aborted (docs/decisions.md#engine-abort); not awaited, the client may be
                # gone.
                ledger.append(finished(assembler, aborted=True))
                stream_cut(service, record, cut)

    return StreamingResponse(
        events(),
        media_type="text/event-stream",
        headers={RECORD_ID_HEADER: record.id, "cache-control": "no-cache"},
    )


def _error_event(message: str) -> bytes:
    """The server-sent event that tells a streaming client its answer was broken off."""
    return f"data: {json.dumps({'error': {'message': message, 'type': 'aborted'}})}\n\n".encode()


def engine_failure(
    exc: EngineError, publisher: Publisher | None = None, route: EngineRoute | None = None
) -> Response:
    if publisher is not None and route is not None:
        publisher.call_failed(route, exc.status, exc.body)
    body = ErrorBody(
        "engine_error" if exc.status >= 500 else "invalid_request",
        str(exc),
        (ErrorDetail("engine", str(exc)),),
    )
    content = unstructure(body)
    if exc.body is not None:
        content["engine"] = exc.body
    return JSONResponse(content, exc.status, headers=retry_headers(exc))


def retry_headers(exc: EngineError) -> dict[str, str]:
    """``Retry-After`` for an engine that cannot answer yet (a 503), which OpenAI's clients
    wait for and retry; nothing for any other failure."""
    if exc.status == 503 and exc.retry_after is not None:
        return {"retry-after": str(exc.retry_after)}
    return {}


_SCENARIO_HEADER = {SCENARIO_HEADER: "the scenario (or use the /scenarios/{scenario} path)"}
_TAG_HEADERS = {f"{TAG_HEADER_PREFIX}<name>": "a tag of the recorded call"}

#: The inference routes.
ROUTES: Final = (
    ApiRoute(
        "POST",
        "/v1/chat/completions",
        "OpenAI-compatible chat completions; the scenario from the x-reef-scenario header",
        chat_completions,
        ChatCompletionRequest,
        {200: None},
        "infer",
        {**_SCENARIO_HEADER, **_TAG_HEADERS},
    ),
    ApiRoute(
        "POST",
        "/scenarios/{scenario}/v1/chat/completions",
        "OpenAI-compatible chat completions in a scenario",
        chat_completions,
        ChatCompletionRequest,
        {200: None},
        "infer",
        _TAG_HEADERS,
    ),
)
