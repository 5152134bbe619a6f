"""The training-control routes of a scenario: its training mode, its instructions, its manual
buffer.

Each is stored, then the runtime hears of it (:class:`~reef.server.service_runtime.ServiceRuntime`);
no route calls a trainer, which reads the store at its next step (``docs/service.md``).
"""

from __future__ import annotations

from typing import Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from reef.pipeline_context import check_training_mode
from reef.server.bodies import (
    BufferEdit,
    InstructionBody,
    InstructionReceipt,
    ManualBuffers,
    ScenarioUpdate,
    ScenarioUpdated,
    answer,
    structure,
)
from reef.server.errors import ApiError
from reef.server.openapi import ApiRoute
from reef.server.request_json import read_json
from reef.server.service import ServedScenario, check_trainer, service_of
from reef.storage import ConflictError, UnknownSampleError
from reef.storage.scenario_settings import TRAINING_MODE_SETTING

__all__ = ["ROUTES"]


async def update_scenario(request: Request) -> Response:
    """``POST /reef/scenarios/{scenario}/update``: store the training mode every trainer of
    the scenario supports."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    update = structure(await read_json(request, service.options.max_body_bytes), ScenarioUpdate)
    try:
        mode = check_training_mode(update.training_mode)
    except ValueError as exc:
        raise ApiError.one(400, "invalid_request", "$.training_mode", str(exc)) from None
    scenario.admission.check_training_mode(mode)
    await anyio.to_thread.run_sync(scenario.settings.set, TRAINING_MODE_SETTING, mode)
    service.runtime.training_mode_changed(scenario.name, mode)
    return answer(ScenarioUpdated(scenario.name, mode))


async def post_instruction(request: Request) -> Response:
    """``POST /reef/scenarios/{scenario}/instructions``: queue a TRAIN instruction (201), or
    find the same one queued (200)."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    body = structure(await read_json(request, service.options.max_body_bytes), InstructionBody)
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
        service.runtime.instructions_queued(scenario.name)
    return answer(
        InstructionReceipt(scenario.name, body.request_id, queued), 201 if queued else 200
    )


# -- the manual buffer -------------------------------------------------------------------------


def _buffer_trainers(scenario: ServedScenario, trainer: str | None) -> list[str]:
    trainers = scenario.admission.trainers
    if trainer is None:
        if not trainers:
            raise ApiError.one(
                400,
                "invalid_request",
                "scenario",
                f"scenario {scenario.name!r} has no trainer (no training section)",
            )
        return list(trainers)
    check_trainer(scenario, trainer, "$.trainer")
    return [trainer]


def _buffers(scenario: ServedScenario) -> ManualBuffers:
    return ManualBuffers(
        scenario.name,
        {
            trainer: tuple(s.id for s in scenario.samples.manual_buffer(trainer))
            for trainer in scenario.admission.trainers
        },
    )


async def _edit_buffer(request: Request, *, insert: bool) -> Response:
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    edit = structure(await read_json(request, service.options.max_body_bytes), BufferEdit)
    trainers = _buffer_trainers(scenario, edit.trainer)

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
        return _buffers(scenario)

    buffers = await anyio.to_thread.run_sync(change)
    service.runtime.manual_buffer_changed(scenario.name)
    return answer(buffers)


async def insert_into_buffer(request: Request) -> Response:
    """``POST /reef/scenarios/{scenario}/insert_into_buffer``: every sample must be stored."""
    return await _edit_buffer(request, insert=True)


async def remove_from_buffer(request: Request) -> Response:
    """``POST /reef/scenarios/{scenario}/remove_from_buffer``."""
    return await _edit_buffer(request, insert=False)


async def get_buffer(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/buffer``: each trainer's manual buffer."""
    _, scenario = service_of(request).authorised(request, "admin")
    return answer(await anyio.to_thread.run_sync(_buffers, scenario))


#: The training-control routes.
ROUTES: Final = (
    ApiRoute(
        "POST",
        "/reef/scenarios/{scenario}/update",
        "select the training mode (auto or manual), stored durably",
        update_scenario,
        ScenarioUpdate,
        {200: ScenarioUpdated},
        "admin",
    ),
    ApiRoute(
        "POST",
        "/reef/scenarios/{scenario}/instructions",
        "queue a TRAIN instruction (manual mode)",
        post_instruction,
        InstructionBody,
        {201: InstructionReceipt, 200: InstructionReceipt},
        "admin",
    ),
    ApiRoute(
        "POST",
        "/reef/scenarios/{scenario}/insert_into_buffer",
        "add samples to the manual buffer",
        insert_into_buffer,
        BufferEdit,
        {200: ManualBuffers},
        "admin",
    ),
    ApiRoute(
        "POST",
        "/reef/scenarios/{scenario}/remove_from_buffer",
        "take samples out of the manual buffer",
        remove_from_buffer,
        BufferEdit,
        {200: ManualBuffers},
        "admin",
    ),
    ApiRoute(
        "GET",
        "/reef/scenarios/{scenario}/buffer",
        "the manual buffer of each trainer",
        get_buffer,
        None,
        {200: ManualBuffers},
        "admin",
    ),
)
