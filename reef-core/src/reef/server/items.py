"""The data-item routes: ATIF trajectories uploaded once, attached to scenarios to train.

An item is stored once in the deployment's own storage (the :data:`~reef.server.service.ITEMS_STORE`
task store), by id; attaching it to a scenario admits it as each trainer of the scenario will
read it (:meth:`~reef.server.admission.ScenarioAdmission.check_upload`) and stores it as an
upload in the scenario's sample store. Detaching, or deleting the item, takes it out again
(P-UP-2).

An item belongs to whoever uploaded it: to the scenarios its token is limited to, or to the
token itself when that token is not limited. A caller sees it when it may see every scenario,
shares one of those scenarios, or is that token; to anyone else it does not exist (404), so a
token of one scenario cannot read, attach or delete another scenario's items.
"""

from __future__ import annotations

from typing import Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from reef.core.atif import AtifFormatError, trajectory_from_json, trajectory_to_json
from reef.core.job_data import TrajectorySample, sample_body
from reef.core.records import JSON
from reef.server.auth import Caller
from reef.server.bodies import (
    ItemDocument,
    ItemReceipt,
    ItemUpload,
    answer,
    structure,
)
from reef.server.errors import ApiError
from reef.server.names import check_name
from reef.server.openapi import ApiRoute
from reef.server.request_json import read_json
from reef.server.service import Service, service_of
from reef.storage import ConflictError, NewSample

__all__ = ["ROUTES"]


def _attached(service: Service, caller: Caller, item_id: str) -> tuple[str, ...]:
    """The scenarios ``caller`` may see that ``item_id`` is attached to."""
    return tuple(
        name
        for name, scenario in service.scenarios.items()
        if caller.sees(name) and scenario.samples.get([item_id])
    )


def _owner(caller: Caller) -> JSON:
    """Who an item uploaded by ``caller`` belongs to, as stored beside it."""
    return {
        "token": caller.name,
        "scenarios": None if caller.scenarios is None else sorted(caller.scenarios),
    }


def _sees(caller: Caller, value: JSON) -> bool:
    """Whether ``caller`` may see the stored item ``value`` (see the module docstring); an
    item stored without an owner is seen only by callers that see every scenario."""
    if caller.scenarios is None:
        return True
    owner = value.get("owner") if isinstance(value, dict) else None
    if not isinstance(owner, dict):
        return False
    scenarios = owner.get("scenarios")
    if isinstance(scenarios, list) and caller.scenarios.intersection(scenarios):
        return True
    return owner.get("token") is not None and owner.get("token") == caller.name


def _item(service: Service, caller: Caller, item_id: str) -> JSON:
    value = service.items.get(item_id)
    if not isinstance(value, dict) or not _sees(caller, value):
        raise ApiError.one(404, "not_found", "item_id", f"no data item {item_id!r}")
    return value


async def post_item(request: Request) -> Response:
    """``POST /reef/items``: store an item (201), or find the same one stored (200)."""
    service = service_of(request)
    caller = service.caller(request)
    caller.require("feedback")
    upload = structure(await read_json(request, service.options.max_item_bytes), ItemUpload)
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
    if upload.id is None:
        # The id comes from the trajectory: a name like any other the routes take, or the
        # item could never be read or deleted by its path.
        named_by = "trajectory_id" if trajectory.trajectory_id else "session_id"
        check_name(item_id, f"$.trajectory.{named_by}")
    value = {"trajectory": trajectory_to_json(trajectory), "owner": _owner(caller)}

    def store() -> tuple[bool, tuple[str, ...]]:
        if service.items.put_new(item_id, value):
            return True, ()
        stored = service.items.get(item_id)
        if not isinstance(stored, dict) or not _sees(caller, stored):
            # Not this caller's to read or compare: say only that the id is taken.
            raise ApiError.one(
                409, "conflict", "$.id", f"item id {item_id!r} is taken; choose another id"
            )
        if stored.get("trajectory") != value["trajectory"]:
            raise ApiError.one(
                409, "conflict", "$.id", f"item {item_id!r} is stored with another trajectory"
            )
        return False, _attached(service, caller, item_id)

    new, attached = await anyio.to_thread.run_sync(store)
    return answer(ItemReceipt(item_id, attached), 201 if new else 200)


async def get_item(request: Request) -> Response:
    """``GET /reef/items/{item_id}``."""
    service = service_of(request)
    caller = service.caller(request)
    caller.require("feedback")
    item_id = request.path_params["item_id"]

    def read() -> ItemDocument:
        trajectory = _item(service, caller, item_id)["trajectory"]
        return ItemDocument(item_id, trajectory, _attached(service, caller, item_id))

    return answer(await anyio.to_thread.run_sync(read))


async def delete_item(request: Request) -> Response:
    """``DELETE /reef/items/{item_id}``: the item leaves every scenario, then the store."""
    service = service_of(request)
    caller = service.caller(request)
    caller.require("feedback")
    item_id = request.path_params["item_id"]

    def delete() -> tuple[str, ...]:
        _item(service, caller, item_id)
        attached = tuple(
            name for name, scenario in service.scenarios.items() if scenario.samples.get([item_id])
        )
        for name in attached:
            caller.require("feedback", name)
        # The item leaves every scenario it was in (P-UP-2), then the store.
        for name in attached:
            service.scenarios[name].samples.remove_upload(item_id)
        service.items.delete(item_id)
        return attached

    return answer(ItemReceipt(item_id, await anyio.to_thread.run_sync(delete)))


async def attach_item(request: Request) -> Response:
    """``POST /reef/scenarios/{scenario}/items/{item_id}``: admitted as the scenario's
    trainers will read it, then stored as an upload (201), or found attached (200)."""
    service = service_of(request)
    caller, scenario = service.authorised(request, "feedback")
    item_id = request.path_params["item_id"]

    def attach() -> tuple[bool, tuple[str, ...]]:
        trajectory = _item(service, caller, item_id)["trajectory"]
        scenario.admission.check_upload(item_id, trajectory)
        upload = NewSample(item_id, "trajectory", sample_body(TrajectorySample(trajectory)))
        try:
            new = scenario.samples.add_upload(upload)
        except ConflictError as exc:
            raise ApiError.one(409, "conflict", "item_id", str(exc)) from None
        return new, _attached(service, caller, item_id)

    new, attached = await anyio.to_thread.run_sync(attach)
    return answer(ItemReceipt(item_id, attached), 201 if new else 200)


async def detach_item(request: Request) -> Response:
    """``DELETE /reef/scenarios/{scenario}/items/{item_id}``."""
    service = service_of(request)
    caller, scenario = service.authorised(request, "feedback")
    item_id = request.path_params["item_id"]

    def detach() -> tuple[str, ...]:
        if not scenario.samples.remove_upload(item_id):
            raise ApiError.one(
                404,
                "not_found",
                "item_id",
                f"item {item_id!r} is not attached to {scenario.name!r}",
            )
        return _attached(service, caller, item_id)

    return answer(ItemReceipt(item_id, await anyio.to_thread.run_sync(detach)))


#: The data-item routes.
ROUTES: Final = (
    ApiRoute(
        "POST",
        "/reef/items",
        "upload an ATIF trajectory as a data item",
        post_item,
        ItemUpload,
        {201: ItemReceipt, 200: ItemReceipt},
        "feedback",
    ),
    ApiRoute(
        "GET",
        "/reef/items/{item_id}",
        "a data item and the scenarios it is attached to",
        get_item,
        None,
        {200: ItemDocument},
        "feedback",
    ),
    ApiRoute(
        "DELETE",
        "/reef/items/{item_id}",
        "delete a data item: it leaves every scenario",
        delete_item,
        None,
        {200: ItemReceipt},
        "feedback",
    ),
    ApiRoute(
        "POST",
        "/reef/scenarios/{scenario}/items/{item_id}",
        "attach a data item to a scenario (its trainers train it)",
        attach_item,
        None,
        {201: ItemReceipt, 200: ItemReceipt},
        "feedback",
    ),
    ApiRoute(
        "DELETE",
        "/reef/scenarios/{scenario}/items/{item_id}",
        "detach a data item from a scenario (its trainers forget it)",
        detach_item,
        None,
        {200: ItemReceipt},
        "feedback",
    ),
)
