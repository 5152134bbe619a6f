"""The inference routes of the other API formats: OpenAI Responses and Anthropic Messages.

``POST /v1/responses`` and ``POST /v1/messages`` (and their ``/scenarios/{scenario}/...``
forms) are answered as ``POST /v1/chat/completions`` is (:mod:`reef.server.inference`): the same
scenario header or path, auth scope, tag headers, size limits, admission and ledger. The
scenario's engine answers in chat completions, and the answer is translated back
(:mod:`reef.engines.translation`): streamed in the format's own events, recorded in the
format's own shape (``api_format`` ``openai.responses`` or ``anthropic.messages``), under an id
of the format (``resp_...``, ``msg_...``) that is the id the agent's SDK holds and a report
names. Errors are shaped as each format's clients read them. ``GET /v1/models`` lists what the
caller's scenarios serve. ``docs/api-formats.md`` has the mapping and what is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Final

import attrs
from sqlalchemy.exc import OperationalError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from reef.core.api_formats import (
    CHAT_COMPLETIONS,
    MESSAGES,
    RESPONSES,
    FormatError,
    chat_request,
    image_parts,
)
from reef.core.records import JSON, TAG_HEADER_PREFIX, InferenceRecord
from reef.engines.interface import ChunkAssembler, EngineError
from reef.engines.native import NativeStream, with_record_id
from reef.engines.publisher import EngineRoute, Publisher
from reef.engines.translation import (
    Event,
    Translator,
    encode_event,
    translate_completion,
    translator_for,
)
from reef.server.bodies import (
    MessagesRequest,
    ModelEntry,
    ModelList,
    ResponsesRequest,
    answer,
    structure,
    unstructure,
)
from reef.server.errors import ApiError, ErrorDetail
from reef.server.inference import (
    RECORD_ID_HEADER,
    SCENARIO_HEADER,
    answered_by,
    called_scenario,
    new_call,
    note_call,
    retry_headers,
)
from reef.server.metrics import stream_cut
from reef.server.openapi import ApiRoute
from reef.server.request_json import read_json
from reef.server.response_chains import ResponseChains
from reef.server.service import ServedScenario, Service, service_of

__all__ = ["ROUTES", "format_error"]

_log = logging.getLogger(__name__)

#: Each format's route, and the prefix of its ids.
_ROUTE: Final = {RESPONSES: "/v1/responses", MESSAGES: "/v1/messages"}
_ID_PREFIX: Final = {RESPONSES: "resp_", MESSAGES: "msg_"}

#: Anthropic's error types, by HTTP status.
_ANTHROPIC_ERRORS: Final = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}


def format_error(
    api_format: str,
    status: int,
    code: str,
    message: str,
    problems: Sequence[ErrorDetail] = (),
) -> Response:
    """A refusal as ``api_format``'s clients read it: OpenAI's ``{"error": {"message", "type",
    "param", "code"}}``, Anthropic's ``{"type": "error", "error": {"type", "message"}}``. Beside
    it, as on every Reef refusal, ``problems`` lists each problem with its field."""
    if api_format == MESSAGES:
        kind = _ANTHROPIC_ERRORS.get(status, "api_error")
        body: JSON = {"type": "error", "error": {"type": kind, "message": message}}
    else:
        kind = "invalid_request_error" if status < 500 else "server_error"
        param = problems[0].field if problems else None
        body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    body["problems"] = [unstructure(problem) for problem in problems]
    return JSONResponse(body, status)


async def responses(request: Request) -> Response:
    """``POST /v1/responses`` and ``POST /scenarios/{scenario}/v1/responses``."""
    return await _format_call(request, RESPONSES)


async def messages(request: Request) -> Response:
    """``POST /v1/messages`` and ``POST /scenarios/{scenario}/v1/messages``."""
    return await _format_call(request, MESSAGES)


async def _format_call(request: Request, api_format: str) -> Response:
    try:
        return await _answer(request, api_format)
    except ApiError as exc:
        return format_error(api_format, exc.status, exc.code, str(exc), exc.problems)


async def _answer(request: Request, api_format: str) -> Response:
    service = service_of(request)
    scenario = called_scenario(
        request, service, _ROUTE[api_format], api_key_header=api_format == MESSAGES
    )
    raw = await read_json(request, service.options.max_body_bytes)
    shape: type[ResponsesRequest | MessagesRequest] = (
        ResponsesRequest if api_format == RESPONSES else MessagesRequest
    )
    checked = structure(raw, shape, open_keys=True)
    record = new_call(
        request, scenario, raw, f"{_ID_PREFIX[api_format]}{uuid.uuid4().hex}", api_format
    )
    chains = _chains(service, scenario)
    complete = await chains.complete(raw) if api_format == RESPONSES else raw
    native = scenario.engine is not None and api_format in scenario.engine.native_formats
    if native:
        # The engine answers the format itself (docs/api-formats.md#native-forwarding): the
        # whole request, chained calls resolved, for the engine to keep nothing.
        forwarded = dict(complete)
        if api_format == RESPONSES:
            forwarded["store"] = False
    else:
        try:
            forwarded = chat_request(api_format, complete)
        except FormatError as exc:
            raise ApiError.one(400, "invalid_request", exc.path, exc.reason) from None
    images = image_parts(api_format, raw) if scenario.text_only else []
    if images:
        # The engine would refuse the translated request naming its chat path; the client
        # is told the path of its own request.
        raise ApiError.one(
            400,
            "invalid_request",
            images[0],
            "an image cannot be sent to this scenario's engine: the local engine takes text"
            " only (serve the scenario with an engine whose model takes images)",
        )
    # An answer that cannot be recorded is not asked for
    # (docs/service.md#when-the-store-cannot-write).
    await scenario.health.require_writable()
    publisher = service.runtime.publisher(scenario.name)
    route = None if publisher is None else publisher.route()
    if publisher is not None:
        forwarded["model"] = publisher.base_model if route is None else route.model
    translator = translator_for(api_format, record.id, raw)
    call = _Call(
        service, scenario, record, translator, publisher, route, chains, complete, native=native
    )
    if checked.stream:
        return await call.stream(forwarded)
    return await call.whole(forwarded)


def _chains(service: Service, scenario: ServedScenario) -> ResponseChains:
    """The scenario's response chains, made on first use."""
    chains = scenario.response_chains
    if chains is None:
        chains = scenario.response_chains = ResponseChains(scenario.records)
    return chains


@attrs.define
class _Call:
    """One call being answered: what recording it needs.

    ``native``: the engine is asked in the call's own format, and answers in it; else it is
    asked in chat completions, and ``translator`` makes the answer the format's.
    """

    service: Service
    scenario: ServedScenario
    record: InferenceRecord
    translator: Translator
    publisher: Publisher | None
    route: EngineRoute | None
    chains: ResponseChains
    complete: JSON
    native: bool = False

    @property
    def engine_format(self) -> str:
        """The format the engine is asked in: the call's own when native, else chat."""
        return self.record.api_format if self.native else CHAT_COMPLETIONS

    def finished(
        self, response: JSON, answer: JSON, named: str | None, *, aborted: bool
    ) -> InferenceRecord:
        """The record of the call, answered with ``response`` (the format's); ``answer`` is
        the engine's own (which names the artifact that answered)."""
        choice = (answer.get("choices") or [{}])[0]
        engine_abort = isinstance(choice, dict) and choice.get("finish_reason") == "abort"
        return attrs.evolve(
            self.record,
            response=response,
            artifact_id=answered_by(named, answer, self.publisher, self.route),
            ended_at=time.time(),
            aborted=aborted or engine_abort,
        )

    async def whole(self, forwarded: JSON) -> Response:
        assert self.scenario.engine is not None
        try:
            reply = await self.scenario.engine.complete(forwarded, api_format=self.engine_format)
        except EngineError as exc:
            return self.engine_failure(exc)
        if self.native:
            body = with_record_id(reply.body, self.record.id)
            record = self.finished(body, reply.body, reply.artifact_id, aborted=False)
        else:
            body = translate_completion(self.translator, reply.body)
            record = self.finished(
                self.translator.body(), reply.body, reply.artifact_id, aborted=False
            )
        ledger = self.service.ledger(self.scenario)
        linked = await asyncio.wrap_future(ledger.append(record))
        note_call(record, linked, ledger)
        self.chains.remember(record, self.complete)
        return JSONResponse(body, headers={RECORD_ID_HEADER: record.id})

    def engine_failure(self, exc: EngineError) -> Response:
        if self.publisher is not None and self.route is not None:
            self.publisher.call_failed(self.route, exc.status, exc.body)
        code = "engine_error" if exc.status >= 500 else "invalid_request"
        problems = (ErrorDetail("engine", str(exc)),)
        answer = format_error(self.record.api_format, exc.status, code, str(exc), problems)
        answer.headers.update(retry_headers(exc))
        return answer

    async def stream(self, forwarded: JSON) -> Response:
        assert self.scenario.engine is not None
        try:
            started = await self.scenario.engine.stream(forwarded, api_format=self.engine_format)
        except EngineError as exc:
            return self.engine_failure(exc)
        ledger = self.service.ledger(self.scenario)
        reading = _NativeReading(self) if self.native else _TranslatedReading(self)

        async def events() -> AsyncIterator[bytes]:
            stored = False
            cut = "client_left"  # unless the engine is found to have cut it
            try:
                for event in reading.start():
                    yield encode_event(event)
                async for data in started.events:
                    if stored:
                        continue  # after the answer's end: not the answer's (vLLM's [DONE])
                    shown = reading.take(data)
                    if reading.ended:
                        record = reading.record(started.artifact_id, aborted=False)
                        # Durable before the client sees the end, so a report posted right
                        # after the stream finds the record.
                        linked = await asyncio.wrap_future(ledger.append(record))
                        note_call(record, linked, ledger)
                        stored = True
                        self.chains.remember(record, self.complete)
                    for event in shown:
                        yield encode_event(event)
                if stored:
                    return
                _log.warning(
                    "scenario %r: the engine ended a stream before its end", self.scenario.name
                )
                cut = "engine_ended"
                ended = f"the engine ended the stream {reading.cut}"
                yield encode_event(self.translator.error(ended))
            except Exception as exc:
                cut = "engine_error"
                if isinstance(exc, OperationalError):
                    self.service.store_failed(exc)
                _log.warning(
                    "scenario %r: the engine broke off a stream: %r", self.scenario.name, exc
                )
                yield encode_event(self.translator.error(f"the engine broke off: {exc}"))
            finally:
                if not stored:
                    # Broken off: recorded as aborted (docs/decisions.md#engine-abort); not
                    # awaited, the client may be gone.
                    ledger.append(reading.record(started.artifact_id, aborted=True))
                    stream_cut(self.service, self.record, cut)

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={RECORD_ID_HEADER: self.record.id, "cache-control": "no-cache"},
        )


class _TranslatedReading:
    """A chat-completions stream, translated into the call's format as it arrives; it ends
    with ``[DONE]``."""

    cut = "without [DONE]"

    def __init__(self, call: _Call) -> None:
        self.call = call
        self.assembler = ChunkAssembler()
        self.ended = False

    def start(self) -> list[Event]:
        return self.call.translator.start()

    def take(self, data: str) -> list[Event]:
        """The client's events of one ``data:`` payload of the engine's stream."""
        if data == "[DONE]":
            self.ended = True
            return self.call.translator.end()
        with contextlib.suppress(ValueError):
            chunk = json.loads(data)
            if isinstance(chunk, dict):
                self.assembler.add(chunk)
                return self.call.translator.add_chunk(chunk)
        return []

    def record(self, named: str | None, *, aborted: bool) -> InferenceRecord:
        answer = self.assembler.body()
        return self.call.finished(self.call.translator.body(), answer, named, aborted=aborted)


class _NativeReading:
    """A stream in the call's own format, passed on under the record's id; it ends with the
    format's last event."""

    cut = "before its last event"

    def __init__(self, call: _Call) -> None:
        self.call = call
        self.native = NativeStream(call.record.api_format, call.record.id)

    @property
    def ended(self) -> bool:
        return self.native.ended

    def start(self) -> list[Event]:
        return []

    def take(self, data: str) -> list[Event]:
        with contextlib.suppress(ValueError):
            event = json.loads(data)
            if isinstance(event, dict):
                shown = self.native.add(event)
                return [(str(shown.get("type") or "message"), shown)]
        return []  # vLLM's [DONE] after message_stop, or a line that is not an event

    def record(self, named: str | None, *, aborted: bool) -> InferenceRecord:
        body = self.native.body()
        return self.call.finished(body, body, named, aborted=aborted)


async def models(request: Request) -> Response:
    """``GET /v1/models`` (the scenarios the caller may call, or the one its scenario header
    names) and ``GET /scenarios/{scenario}/v1/models``."""
    service = service_of(request)
    try:
        if "scenario" in request.path_params or request.headers.get(SCENARIO_HEADER):
            chosen = [called_scenario(request, service, "/v1/models")]
        else:
            caller = service.caller(request)
            chosen = [s for s in service.scenarios.values() if caller.may("infer", s.name)]
    except ApiError as exc:
        return format_error(RESPONSES, exc.status, exc.code, str(exc), exc.problems)
    entries = tuple(
        ModelEntry(id=scenario.serving_model or scenario.name, scenario=scenario.name)
        for scenario in chosen
        if scenario.engine is not None
    )
    return answer(ModelList(entries))


_SCENARIO = {SCENARIO_HEADER: "the scenario (or use the /scenarios/{scenario} path)"}
_TAGS = {f"{TAG_HEADER_PREFIX}<name>": "a tag of the recorded call"}


def _routes() -> tuple[ApiRoute, ...]:
    rows = []
    for api_format, handler, body, what in (
        (RESPONSES, responses, ResponsesRequest, "OpenAI Responses API"),
        (MESSAGES, messages, MessagesRequest, "Anthropic Messages API"),
    ):
        path = _ROUTE[api_format]
        rows.append(
            ApiRoute(
                "POST",
                path,
                f"{what}; the scenario from the x-reef-scenario header",
                handler,
                body,
                {200: None},
                "infer",
                {**_SCENARIO, **_TAGS},
            )
        )
        rows.append(
            ApiRoute(
                "POST",
                f"/scenarios/{{scenario}}{path}",
                f"{what} in a scenario",
                handler,
                body,
                {200: None},
                "infer",
                _TAGS,
            )
        )
    rows.append(
        ApiRoute(
            "GET",
            "/v1/models",
            "the models of the scenarios the caller may call",
            models,
            None,
            {200: ModelList},
            "infer",
            _SCENARIO,
        )
    )
    rows.append(
        ApiRoute(
            "GET",
            "/scenarios/{scenario}/v1/models",
            "the models a scenario serves",
            models,
            None,
            {200: ModelList},
            "infer",
        )
    )
    return tuple(rows)


#: The routes of the Responses and Messages formats, and the model list.
ROUTES: Final = _routes()
