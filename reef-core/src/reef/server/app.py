"""The ASGI application: ``create_app(deployment, databases=..., plugins=...)``.

One Starlette application serves the inference service and the HTTP API. Its routes are
storage-authoritative: admission checks a request completely, writes it durably in one
transaction and answers; the trainers read the stores. No route calls a trainer (a mode change,
an instruction, a manual-buffer edit is stored, then an optional runtime hook hears of it).

Every refused request gets a 4xx whose JSON body (:class:`~reef.server.errors.ErrorBody`) names
the field and the reason, and nothing of it is stored. See ``docs/service.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Final

import anyio.to_thread
import attrs
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from reef.core.atif import AtifFormatError, trajectory_from_json, trajectory_to_json
from reef.core.deployment import Deployment, ScenarioSection, ServingSection
from reef.core.job_data import TrajectorySample, sample_body
from reef.core.plugins import Plugins
from reef.core.records import (
    JSON,
    TAG_HEADER_PREFIX,
    InferenceRecord,
    Report,
    has_eligibility_flag,
)
from reef.pipeline_context import check_training_mode
from reef.server.admission import ScenarioAdmission
from reef.server.auth import Authenticator, Caller, Scope
from reef.server.bodies import (
    BufferEdit,
    ChatCompletionRequest,
    InstructionBody,
    InstructionReceipt,
    ItemDocument,
    ItemReceipt,
    ItemUpload,
    ManualBuffers,
    ReportBody,
    ReportReceipt,
    ScenarioUpdate,
    ScenarioUpdated,
    StatusDocument,
    answer,
    error_answer,
    read_json,
    structure,
    unstructure,
)
from reef.server.engines import ChatEngine, ChunkAssembler, EngineError, FunctionEngine, HttpEngine
from reef.server.errors import (
    ApiError,
    ErrorBody,
    ErrorDetail,
    ReportRejected,
    ServiceConfigError,
)
from reef.server.ledger import ScenarioLedger
from reef.server.openapi import ApiRoute, openapi_document
from reef.server.service_runtime import ServiceRuntime
from reef.server.status import scenario_status
from reef.storage import (
    ConflictError,
    Database,
    NewSample,
    RecordStore,
    ScenarioSettings,
    TaskStorage,
    TrainerSamples,
    UnknownSampleError,
    open_database,
)
from reef.train.trainer import TRAINING_MODE_SETTING

__all__ = [
    "LOCAL_ENGINE",
    "RECORD_ID_HEADER",
    "SCENARIO_HEADER",
    "ServerOptions",
    "create_app",
    "open_databases",
]

_log = logging.getLogger(__name__)

#: The request header that names the scenario of ``POST /v1/chat/completions``.
SCENARIO_HEADER: Final = "x-reef-scenario"
#: The response header that gives the id of the inference record of a call.
RECORD_ID_HEADER: Final = "x-reef-record-id"
#: ``serving.engine`` value for the built-in local engine (given by the runtime).
LOCAL_ENGINE: Final = "local"
#: The task store (of the deployment's own storage, scenario ``""``) that holds data items.
ITEMS_STORE: Final = "reef.data-items"


@attrs.frozen
class ServerOptions:
    """How the service runs.

    :ivar allow_unauthenticated: run without tokens; the service then answers loopback clients
        only (and ``reef serve`` binds to loopback only).
    :ivar max_body_bytes: the largest request body (413 beyond).
    :ivar max_item_bytes: the largest data-item upload (413 beyond).
    :ivar engine_timeout: seconds to wait for an engine.
    """

    allow_unauthenticated: bool = False
    max_body_bytes: int = 8 << 20
    max_item_bytes: int = 32 << 20
    engine_timeout: float = 600.0


# -- one scenario ------------------------------------------------------------------------------


@attrs.define
class _Scenario:
    name: str
    section: ScenarioSection
    records: RecordStore
    samples: TrainerSamples
    settings: ScenarioSettings
    admission: ScenarioAdmission
    ledger: ScenarioLedger | None = None
    engine: ChatEngine | None = None


class _Service:
    """The state behind the routes, and the routes themselves."""

    def __init__(
        self,
        deployment: Deployment,
        *,
        databases: Mapping[str, Database],
        plugins: Plugins,
        runtime: ServiceRuntime,
        options: ServerOptions,
        environ: Mapping[str, str] | None,
    ) -> None:
        self.deployment = deployment
        self.runtime = runtime
        self.options = options
        self.auth = Authenticator(
            deployment.auth, allow_unauthenticated=options.allow_unauthenticated
        )
        self.items = TaskStorage(_database(databases, deployment.storage.url), "").open(ITEMS_STORE)
        self.document: JSON = {}
        self.scenarios: dict[str, _Scenario] = {}
        for name, section in deployment.scenarios.items():
            database = _database(databases, deployment.storage_of(name).url)
            serving = deployment.serving_of(name)
            self.scenarios[name] = _Scenario(
                name=name,
                section=section,
                records=RecordStore(database, name),
                samples=TrainerSamples(database, name),
                settings=ScenarioSettings(database, name),
                admission=ScenarioAdmission.build(name, section, plugins=plugins, environ=environ),
            )
            if serving is not None:
                self.scenarios[name].engine = self._engine(name, serving)

    def _engine(self, scenario: str, serving: ServingSection) -> ChatEngine:
        """The scenario's engine, made when the application is (so a bad engine URL or proxy
        setting stops ``reef serve`` before it listens). :raises ServiceConfigError: where
        :class:`HttpEngine` refuses its URL or proxy, or for a local engine the runtime does
        not have."""
        if serving.engine == LOCAL_ENGINE:
            local = self.runtime.local_engine(scenario)
            if local is None:
                raise ServiceConfigError(
                    f"scenario {scenario!r} is served by the local engine, and the runtime has"
                    " none for it"
                )
            return FunctionEngine(local)
        try:
            return HttpEngine(
                serving.engine,
                api_key=serving.api_key,
                model=serving.model,
                timeout=self.options.engine_timeout,
            )
        except ValueError as exc:
            raise ServiceConfigError(f"scenario {scenario!r}: {exc}") from None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        stores = [s.records for s in self.scenarios.values()]
        for scenario in self.scenarios.values():
            others = [store for store in stores if store is not scenario.records]
            scenario.ledger = ScenarioLedger(scenario.records, others)

    async def stop(self) -> None:
        for scenario in self.scenarios.values():
            if scenario.ledger is not None:
                await anyio.to_thread.run_sync(scenario.ledger.close)
                scenario.ledger = None
            if scenario.engine is not None:
                await scenario.engine.aclose()  # its idle connections; usable again after
        for scenario in self.scenarios.values():
            scenario.admission.close()

    # -- common steps ---------------------------------------------------------------------------

    def caller(self, request: Request) -> Caller:
        client = request.client.host if request.client else None
        return self.auth.caller(request.headers.get("authorization"), client)

    def scenario(self, name: str, field: str = "scenario") -> _Scenario:
        found = self.scenarios.get(name)
        if found is None:
            raise ApiError.one(
                404,
                "not_found",
                field,
                f"no scenario {name!r}; the deployment has {', '.join(sorted(self.scenarios))}",
            )
        return found

    def authorised(self, request: Request, scope: Scope) -> tuple[Caller, _Scenario]:
        caller = self.caller(request)
        scenario = self.scenario(request.path_params["scenario"])
        caller.require(scope, scenario.name)
        return caller, scenario

    @staticmethod
    def ledger(scenario: _Scenario) -> ScenarioLedger:
        if scenario.ledger is None:
            raise ApiError.one(409, "not_running", "scenario", "the service is not running")
        return scenario.ledger

    # -- the document ---------------------------------------------------------------------------

    async def openapi(self, request: Request) -> Response:
        return JSONResponse(self.document)

    # -- inference ------------------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        caller = self.caller(request)
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
                    "name the scenario in this header, or post to"
                    " /scenarios/{scenario}/v1/chat/completions",
                )
        scenario = self.scenario(name, field)
        caller.require("infer", scenario.name)
        raw = await read_json(request, self.options.max_body_bytes)
        checked = structure(raw, ChatCompletionRequest, open_keys=True)
        for position, message in enumerate(checked.messages):
            if not isinstance(message.get("role"), str):
                raise ApiError.one(
                    400,
                    "invalid_request",
                    f"$.messages[{position}].role",
                    "each message needs a role (a string)",
                )
        if scenario.engine is None:
            raise ApiError.one(
                409, "no_engine", "scenario", f"scenario {scenario.name!r} has no serving engine"
            )
        tags = {
            key[len(TAG_HEADER_PREFIX) :]: value
            for key, value in request.headers.items()
            if key.startswith(TAG_HEADER_PREFIX) and len(key) > len(TAG_HEADER_PREFIX)
        }
        record = InferenceRecord(
            id=f"inf-{uuid.uuid4().hex}",
            scenario=scenario.name,
            request=raw,
            response=None,
            tags=tags,
            started_at=time.time(),
        )
        if checked.stream:
            return await self._stream(scenario, record)
        try:
            reply = await scenario.engine.complete(raw)
        except EngineError as exc:
            return _engine_failure(exc)
        record = attrs.evolve(
            record,
            response=reply.body,
            artifact_id=reply.artifact_id or self.runtime.served_artifact_id(scenario.name),
            ended_at=time.time(),
        )
        await asyncio.wrap_future(self.ledger(scenario).append(record))
        headers = {RECORD_ID_HEADER: record.id}
        if reply.content is not None:  # the engine's own bytes, not encoded a second time
            return Response(reply.content, media_type="application/json", headers=headers)
        return JSONResponse(reply.body, headers=headers)

    async def _stream(self, scenario: _Scenario, record: InferenceRecord) -> Response:
        assert scenario.engine is not None
        try:
            started = await scenario.engine.stream(record.request)
        except EngineError as exc:
            return _engine_failure(exc)
        ledger = self.ledger(scenario)
        artifact = started.artifact_id or self.runtime.served_artifact_id(scenario.name)

        def finished(assembler: ChunkAssembler, *, aborted: bool) -> InferenceRecord:
            body = assembler.body()
            fingerprint = body.get("system_fingerprint")
            return attrs.evolve(
                record,
                response=body,
                artifact_id=artifact or (fingerprint if isinstance(fingerprint, str) else None),
                ended_at=time.time(),
                aborted=aborted,
            )

        async def events() -> AsyncIterator[bytes]:
            assembler = ChunkAssembler()
            stored = False
            try:
                async for data in started.events:
                    if data == "[DONE]":
                        # Durable before the client sees the end, so a report posted right
                        # after the stream finds the record.
                        await asyncio.wrap_future(ledger.append(finished(assembler, aborted=False)))
                        stored = True
                        yield b"data: [DONE]\n\n"
                        return
                    with contextlib.suppress(ValueError):
                        chunk = json.loads(data)
                        if isinstance(chunk, dict):
                            assembler.add(chunk)
                    yield f"data: {data}\n\n".encode()
            except Exception as exc:
                _log.warning("scenario %r: the engine broke off a stream: %r", scenario.name, exc)
                error = {"error": {"message": f"the engine broke off: {exc}", "type": "aborted"}}
                yield f"data: {json.dumps(error)}\n\n".encode()
            finally:
                if not stored:
                    # Broken off (by the engine, or the client left): the exchange is recorded
                    # as aborted (DECISIONS 6); not awaited, the client may be gone.
                    ledger.append(finished(assembler, aborted=True))

        return StreamingResponse(
            events(),
            media_type="text/event-stream",
            headers={RECORD_ID_HEADER: record.id, "cache-control": "no-cache"},
        )

    # -- reports --------------------------------------------------------------------------------

    async def post_report(self, request: Request) -> Response:
        _, scenario = self.authorised(request, "feedback")
        body = structure(await read_json(request, self.options.max_body_bytes), ReportBody)
        report = admissible_report(scenario.name, body)
        receipt, new = await asyncio.wrap_future(self.ledger(scenario).admit(report))
        return answer(receipt, 201 if new else 200)

    # -- data items -----------------------------------------------------------------------------

    def _attached(self, item_id: str) -> tuple[str, ...]:
        return tuple(
            name for name, scenario in self.scenarios.items() if scenario.samples.get([item_id])
        )

    async def post_item(self, request: Request) -> Response:
        self.caller(request).require("feedback")
        upload = structure(await read_json(request, self.options.max_item_bytes), ItemUpload)
        try:
            trajectory = trajectory_from_json(upload.trajectory)
        except AtifFormatError as exc:
            path = exc.path or "$"
            field = "$.trajectory" + path[1:] if path.startswith("$") else "$.trajectory"
            raise ApiError.one(400, "invalid_request", field, str(exc)) from None
        item_id = upload.id or trajectory.trajectory_id or trajectory.session_id
        if not item_id:
            raise ApiError.one(
                400,
                "invalid_request",
                "$.id",
                "give the item an id, or the trajectory a trajectory_id or session_id",
            )
        value = {"trajectory": trajectory_to_json(trajectory)}

        def store() -> tuple[bool, tuple[str, ...]]:
            if self.items.put_new(item_id, value):
                return True, ()
            if self.items.get(item_id) != value:
                raise ApiError.one(
                    409, "conflict", "$.id", f"item {item_id!r} is stored with another trajectory"
                )
            return False, self._attached(item_id)

        new, attached = await anyio.to_thread.run_sync(store)
        return answer(ItemReceipt(item_id, attached), 201 if new else 200)

    def _item(self, item_id: str) -> JSON:
        value = self.items.get(item_id)
        if not isinstance(value, dict):
            raise ApiError.one(404, "not_found", "item_id", f"no data item {item_id!r}")
        return value

    async def get_item(self, request: Request) -> Response:
        self.caller(request).require("feedback")
        item_id = request.path_params["item_id"]

        def read() -> ItemDocument:
            return ItemDocument(item_id, self._item(item_id)["trajectory"], self._attached(item_id))

        return answer(await anyio.to_thread.run_sync(read))

    async def delete_item(self, request: Request) -> Response:
        caller = self.caller(request)
        caller.require("feedback")
        item_id = request.path_params["item_id"]

        def delete() -> tuple[str, ...]:
            self._item(item_id)
            attached = self._attached(item_id)
            for name in attached:
                caller.require("feedback", name)
            # The item leaves every scenario it was in (P-UP-2), then the store.
            for name in attached:
                self.scenarios[name].samples.remove_upload(item_id)
            self.items.delete(item_id)
            return attached

        return answer(ItemReceipt(item_id, await anyio.to_thread.run_sync(delete)))

    async def attach_item(self, request: Request) -> Response:
        _, scenario = self.authorised(request, "feedback")
        item_id = request.path_params["item_id"]

        def attach() -> tuple[bool, tuple[str, ...]]:
            trajectory = self._item(item_id)["trajectory"]
            scenario.admission.check_upload(item_id, trajectory)
            upload = NewSample(item_id, "trajectory", sample_body(TrajectorySample(trajectory)))
            try:
                new = scenario.samples.add_upload(upload)
            except ConflictError as exc:
                raise ApiError.one(409, "conflict", "item_id", str(exc)) from None
            return new, self._attached(item_id)

        new, attached = await anyio.to_thread.run_sync(attach)
        return answer(ItemReceipt(item_id, attached), 201 if new else 200)

    async def detach_item(self, request: Request) -> Response:
        _, scenario = self.authorised(request, "feedback")
        item_id = request.path_params["item_id"]

        def detach() -> tuple[str, ...]:
            if not scenario.samples.remove_upload(item_id):
                raise ApiError.one(
                    404,
                    "not_found",
                    "item_id",
                    f"item {item_id!r} is not attached to {scenario.name!r}",
                )
            return self._attached(item_id)

        return answer(ItemReceipt(item_id, await anyio.to_thread.run_sync(detach)))

    # -- training control -----------------------------------------------------------------------

    async def update_scenario(self, request: Request) -> Response:
        _, scenario = self.authorised(request, "admin")
        update = structure(await read_json(request, self.options.max_body_bytes), ScenarioUpdate)
        try:
            mode = check_training_mode(update.training_mode)
        except ValueError as exc:
            raise ApiError.one(400, "invalid_request", "$.training_mode", str(exc)) from None
        scenario.admission.check_training_mode(mode)
        await anyio.to_thread.run_sync(scenario.settings.set, TRAINING_MODE_SETTING, mode)
        self.runtime.training_mode_changed(scenario.name, mode)
        return answer(ScenarioUpdated(scenario.name, mode))

    async def post_instruction(self, request: Request) -> Response:
        _, scenario = self.authorised(request, "admin")
        body = structure(await read_json(request, self.options.max_body_bytes), InstructionBody)
        # Stored as the trainer reads it: the fields of a TrainingInstruction.
        stored = {"request_id": body.request_id, "text": body.text, "parameters": body.parameters}
        try:
            queued = await anyio.to_thread.run_sync(
                scenario.samples.enqueue_instruction, body.request_id, stored
            )
        except ConflictError:
            raise ApiError.one(
                409,
                "conflict",
                "$.request_id",
                f"instruction {body.request_id!r} was queued with other content",
            ) from None
        if queued:
            self.runtime.instructions_queued(scenario.name)
        return answer(
            InstructionReceipt(scenario.name, body.request_id, queued), 201 if queued else 200
        )

    def _buffer_trainers(self, scenario: _Scenario, trainer: str | None) -> list[str]:
        if trainer is None:
            if not scenario.admission.trainers:
                raise ApiError.one(
                    400,
                    "invalid_request",
                    "scenario",
                    f"scenario {scenario.name!r} has no trainer (no training section)",
                )
            return list(scenario.admission.trainers)
        if trainer not in scenario.admission.trainers:
            raise ApiError.one(
                400,
                "invalid_request",
                "$.trainer",
                f"scenario {scenario.name!r} has no trainer {trainer!r}"
                f" (it has: {', '.join(scenario.admission.trainers) or 'none'})",
            )
        return [trainer]

    def _buffers(self, scenario: _Scenario) -> ManualBuffers:
        return ManualBuffers(
            scenario.name,
            {
                trainer: tuple(s.id for s in scenario.samples.manual_buffer(trainer))
                for trainer in scenario.admission.trainers
            },
        )

    async def _edit_buffer(self, request: Request, *, insert: bool) -> Response:
        _, scenario = self.authorised(request, "admin")
        edit = structure(await read_json(request, self.options.max_body_bytes), BufferEdit)
        trainers = self._buffer_trainers(scenario, edit.trainer)

        def change() -> ManualBuffers:
            if insert:
                # Checked first for every trainer, so a refusal leaves every buffer unchanged.
                stored = {s.id for s in scenario.samples.get(edit.sample_ids)}
                missing = [i for i in edit.sample_ids if i not in stored]
                if missing:
                    raise ApiError.one(
                        400,
                        "invalid_request",
                        f"$.sample_ids[{edit.sample_ids.index(missing[0])}]",
                        str(UnknownSampleError(scenario.name, tuple(missing))),
                    )
            for trainer in trainers:
                if insert:
                    scenario.samples.insert_into_manual_buffer(trainer, edit.sample_ids)
                else:
                    scenario.samples.remove_from_manual_buffer(trainer, edit.sample_ids)
            return self._buffers(scenario)

        buffers = await anyio.to_thread.run_sync(change)
        self.runtime.manual_buffer_changed(scenario.name)
        return answer(buffers)

    async def insert_into_buffer(self, request: Request) -> Response:
        return await self._edit_buffer(request, insert=True)

    async def remove_from_buffer(self, request: Request) -> Response:
        return await self._edit_buffer(request, insert=False)

    async def get_buffer(self, request: Request) -> Response:
        _, scenario = self.authorised(request, "admin")
        return answer(await anyio.to_thread.run_sync(self._buffers, scenario))

    # -- status ---------------------------------------------------------------------------------

    async def status(self, request: Request) -> Response:
        caller = self.caller(request)
        caller.require("admin")

        def read() -> StatusDocument:
            return StatusDocument(
                tuple(
                    scenario_status(
                        scenario.name,
                        records=scenario.records,
                        samples=scenario.samples,
                        settings=scenario.settings,
                        trainers=scenario.admission.trainers,
                    )
                    for scenario in self.scenarios.values()
                    if caller.sees(scenario.name)
                )
            )

        return answer(await anyio.to_thread.run_sync(read))


def _database(databases: Mapping[str, Database], url: str) -> Database:
    try:
        return databases[url]
    except KeyError:
        raise ValueError(f"no opened database for storage {url!r}") from None


def _engine_failure(exc: EngineError) -> Response:
    body = ErrorBody(
        "engine_error" if exc.status >= 500 else "invalid_request",
        str(exc),
        (ErrorDetail("engine", str(exc)),),
    )
    content = unstructure(body)
    if exc.body is not None:
        content["engine"] = exc.body
    return JSONResponse(content, exc.status)


def admissible_report(scenario: str, body: ReportBody) -> Report:
    """The report of ``body`` if its own content is admissible (P-REP-1, P-REP-3): no duplicate
    reference, no ``metadata.training.eligible``, a finite score. The references' existence
    and places are the ledger's to check, against the store.

    :raises ReportRejected: naming the field and the reason.
    """
    if has_eligibility_flag(body.metadata):
        raise ReportRejected(
            "eligibility",
            "$.metadata.training.eligible",
            "a report cannot opt in or out of training: remove metadata.training.eligible",
        )
    if not body.references:
        raise ReportRejected("schema", "$.references", "a report references at least one call")
    seen: dict[str, int] = {}
    for position, reference in enumerate(body.references):
        if reference in seen:
            raise ReportRejected(
                "duplicate",
                f"$.references[{position}]",
                f"{reference!r} is referenced twice (also at $.references[{seen[reference]}])",
            )
        seen[reference] = position
    try:
        return Report(
            id=body.id,
            scenario=scenario,
            references=body.references,
            score=body.score,
            feedback=body.feedback,
            metadata=body.metadata,
            created_at=time.time(),
        )
    except ValueError as exc:
        raise ReportRejected("schema", "$.score", str(exc)) from None


# -- the application ---------------------------------------------------------------------------


def _routes(service: _Service) -> list[ApiRoute]:
    scenario_header = {SCENARIO_HEADER: "the scenario (or use the /scenarios/{scenario} path)"}
    tag_header = {f"{TAG_HEADER_PREFIX}<name>": "a tag of the recorded call"}
    return [
        ApiRoute("GET", "/openapi.json", "this document", service.openapi, responses={200: None}),
        ApiRoute(
            "POST",
            "/v1/chat/completions",
            "OpenAI-compatible chat completions; the scenario from the x-reef-scenario header",
            service.chat_completions,
            ChatCompletionRequest,
            {200: None},
            "infer",
            {**scenario_header, **tag_header},
        ),
        ApiRoute(
            "POST",
            "/scenarios/{scenario}/v1/chat/completions",
            "OpenAI-compatible chat completions in a scenario",
            service.chat_completions,
            ChatCompletionRequest,
            {200: None},
            "infer",
            tag_header,
        ),
        ApiRoute(
            "POST",
            "/reef/scenarios/{scenario}/reports",
            "admit a report (201 new, 200 identical retry)",
            service.post_report,
            ReportBody,
            {201: ReportReceipt, 200: ReportReceipt},
            "feedback",
        ),
        ApiRoute(
            "POST",
            "/reef/items",
            "upload an ATIF trajectory as a data item",
            service.post_item,
            ItemUpload,
            {201: ItemReceipt, 200: ItemReceipt},
            "feedback",
        ),
        ApiRoute(
            "GET",
            "/reef/items/{item_id}",
            "a data item and the scenarios it is attached to",
            service.get_item,
            None,
            {200: ItemDocument},
            "feedback",
        ),
        ApiRoute(
            "DELETE",
            "/reef/items/{item_id}",
            "delete a data item: it leaves every scenario",
            service.delete_item,
            None,
            {200: ItemReceipt},
            "feedback",
        ),
        ApiRoute(
            "POST",
            "/reef/scenarios/{scenario}/items/{item_id}",
            "attach a data item to a scenario (its trainers train it)",
            service.attach_item,
            None,
            {201: ItemReceipt, 200: ItemReceipt},
            "feedback",
        ),
        ApiRoute(
            "DELETE",
            "/reef/scenarios/{scenario}/items/{item_id}",
            "detach a data item from a scenario (its trainers forget it)",
            service.detach_item,
            None,
            {200: ItemReceipt},
            "feedback",
        ),
        ApiRoute(
            "POST",
            "/reef/scenarios/{scenario}/update",
            "select the training mode (auto or manual), stored durably",
            service.update_scenario,
            ScenarioUpdate,
            {200: ScenarioUpdated},
            "admin",
        ),
        ApiRoute(
            "POST",
            "/reef/scenarios/{scenario}/instructions",
            "queue a TRAIN instruction (manual mode)",
            service.post_instruction,
            InstructionBody,
            {201: InstructionReceipt, 200: InstructionReceipt},
            "admin",
        ),
        ApiRoute(
            "POST",
            "/reef/scenarios/{scenario}/insert_into_buffer",
            "add samples to the manual buffer",
            service.insert_into_buffer,
            BufferEdit,
            {200: ManualBuffers},
            "admin",
        ),
        ApiRoute(
            "POST",
            "/reef/scenarios/{scenario}/remove_from_buffer",
            "take samples out of the manual buffer",
            service.remove_from_buffer,
            BufferEdit,
            {200: ManualBuffers},
            "admin",
        ),
        ApiRoute(
            "GET",
            "/reef/scenarios/{scenario}/buffer",
            "the manual buffer of each trainer",
            service.get_buffer,
            None,
            {200: ManualBuffers},
            "admin",
        ),
        ApiRoute(
            "GET",
            "/reef/status",
            "each scenario and trainer: mode, buffer, jobs, drops, errors",
            service.status,
            None,
            {200: StatusDocument},
            "admin",
        ),
    ]


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return error_answer(exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    field = "method" if exc.status_code == 405 else "path"
    return error_answer(
        ApiError.one(exc.status_code, "not_found" if exc.status_code == 404 else "invalid_request",
                     field, f"{exc.detail}: {request.method} {request.url.path}")
    )  # fmt: skip


def create_app(
    deployment: Deployment,
    *,
    databases: Mapping[str, Database],
    plugins: Plugins,
    runtime: ServiceRuntime | None = None,
    options: ServerOptions | None = None,
    environ: Mapping[str, str] | None = None,
) -> Starlette:
    """The service of ``deployment`` as an ASGI application.

    Builds each scenario's stages now (so a bad config fails here, not at the first request);
    the ledgers and engine clients start with the application's lifespan and stop with it.

    :param databases: the opened databases by storage URL: the deployment's own and every
        scenario's (:func:`open_databases`).
    :param plugins: the loaded plugins, which resolve the stage classes.
    :param runtime: the hooks of the process that runs the trainers (the local engine, the
        served artifact, notifications); none by default.
    :param options: how the service runs (auth, limits).
    :raises reef.server.auth.UnauthenticatedServiceError: for a deployment without tokens that
        was not explicitly allowed to run without them.
    """
    service = _Service(
        deployment,
        databases=databases,
        plugins=plugins,
        runtime=runtime or ServiceRuntime(),
        options=options or ServerOptions(),
        environ=environ,
    )
    api_routes = _routes(service)
    service.document = openapi_document(api_routes)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            await service.stop()

    app = Starlette(
        routes=[Route(r.path, r.handler, methods=[r.method]) for r in api_routes],
        exception_handlers={ApiError: _api_error, HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.api_routes = api_routes
    return app


def open_databases(deployment: Deployment) -> dict[str, Database]:
    """Open (and migrate) every database the deployment names, once per URL."""
    urls: Sequence[str] = [deployment.storage.url] + [
        deployment.storage_of(name).url for name in deployment.scenarios
    ]
    return {url: open_database(url) for url in dict.fromkeys(urls)}
