"""The request and response bodies of the HTTP API, as frozen attrs values, and how the
service reads and writes them.

Every body the service reads is structured with cattrs into one of these classes
(:func:`read_json` then :func:`structure`: size-limited, unknown keys refused, JSON types
strict, each problem with its JSON path), and every body it writes is unstructured from one
(:func:`answer`, :func:`error_answer`), so the OpenAPI document (:mod:`reef.server.openapi`) is
generated from the very types the routes use.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Literal, TypeVar

import attrs
import cattrs
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from reef.core.converters import describe, make_converter
from reef.pipeline_context import TrainingMode
from reef.server.errors import ApiError, ErrorBody, ErrorDetail

JSONObject = dict[str, Any]

_T = TypeVar("_T")


# -- inference ---------------------------------------------------------------------------------


@attrs.frozen
class ChatCompletionRequest:
    """The part of an OpenAI chat-completions request that Reef checks before forwarding.

    Other keys (sampling parameters, ``response_format``, ...) are forwarded as they are.
    """

    messages: tuple[JSONObject, ...] = attrs.field(validator=attrs.validators.min_len(1))
    model: str | None = None
    stream: bool = False
    tools: tuple[JSONObject, ...] | None = None


# -- reports -----------------------------------------------------------------------------------


@attrs.frozen
class ReportBody:
    """A report as a client posts it (the scenario is the route's).

    :ivar id: the client's report id; a retry with the same id and content is the same report.
    :ivar references: the inference record ids of the last call of each scored trajectory.
    :ivar score: the reward; absent for feedback without a score.
    :ivar feedback: free-text feedback.
    :ivar metadata: the client's metadata (``metadata.training.eligible`` is refused).
    """

    id: str = attrs.field(validator=attrs.validators.min_len(1))
    references: tuple[str, ...]
    score: float | None = None
    feedback: str | None = None
    metadata: JSONObject = attrs.field(factory=dict)


@attrs.frozen
class ReportReceipt:
    """Proof that a report was admitted; a retry of the same report gets the same receipt.

    :ivar id: the report's id.
    :ivar scenario: its scenario.
    :ivar references: the references it was admitted with.
    :ivar content_hash: the hash of its content (what a retry must match).
    """

    id: str
    scenario: str
    references: tuple[str, ...]
    content_hash: str


# -- data items --------------------------------------------------------------------------------


@attrs.frozen
class ItemUpload:
    """An ATIF trajectory uploaded as a data item.

    :ivar trajectory: the ATIF v1.8 trajectory (JSON object).
    :ivar id: the item's id; by default the trajectory's ``trajectory_id``, else its
        ``session_id``.
    """

    trajectory: JSONObject
    id: str | None = None


@attrs.frozen
class ItemReceipt:
    """A stored data item and the scenarios it is attached to."""

    id: str
    scenarios: tuple[str, ...] = ()


@attrs.frozen
class ItemDocument:
    """A data item as stored: its trajectory and where it is attached."""

    id: str
    trajectory: JSONObject
    scenarios: tuple[str, ...] = ()


# -- training control --------------------------------------------------------------------------


@attrs.frozen
class ScenarioUpdate:
    """``POST /reef/scenarios/{scenario}/update``: select the training mode."""

    training_mode: str


@attrs.frozen
class ScenarioUpdated:
    """The scenario's stored training mode after an update."""

    scenario: str
    training_mode: TrainingMode


@attrs.frozen
class InstructionBody:
    """A TRAIN instruction for manual mode.

    :ivar request_id: the client's id; the job data's id is ``<scenario>:instruction:<id>``.
    :ivar action: only ``TRAIN``.
    :ivar text: what the client asks for, for stages that read it.
    :ivar parameters: the client's parameters.
    """

    request_id: str = attrs.field(validator=attrs.validators.min_len(1))
    action: Literal["TRAIN"] = "TRAIN"
    text: str | None = None
    parameters: JSONObject = attrs.field(factory=dict)


@attrs.frozen
class InstructionReceipt:
    """A queued instruction; ``queued`` is False when the same one was queued before."""

    scenario: str
    request_id: str
    queued: bool


@attrs.frozen
class BufferEdit:
    """Samples to put into or take out of the manual buffer.

    :ivar sample_ids: the samples, by id.
    :ivar trainer: the trainer whose buffer changes; every trainer of the scenario when absent.
    """

    sample_ids: tuple[str, ...] = attrs.field(validator=attrs.validators.min_len(1))
    trainer: str | None = None


@attrs.frozen
class ManualBuffers:
    """The manual buffer of each trainer of a scenario: sample ids in store order."""

    scenario: str
    buffers: Mapping[str, tuple[str, ...]]


# -- status ------------------------------------------------------------------------------------


@attrs.frozen
class TrainerStatus:
    """One trainer of a scenario, as ``GET /reef/status`` shows it.

    Values the trainer alone knows come from its durable status snapshot (``docs/service.md``)
    and are ``None`` until its first snapshot.
    """

    trainer: str
    accepts_trajectories: bool
    supported_training_modes: tuple[str, ...]
    job_samples: int | None
    buffer_size: int | None
    ready_samples: int | None
    pending_instructions: int
    manual_buffer: int
    background_jobs_running: bool | None
    running_job: JSONObject | None
    served_artifact: str | None
    drops: Mapping[str, int]
    last_errors: tuple[JSONObject, ...]
    snapshot_at: float | None
    pipeline: JSONObject
    #: The process whose trainer wrote the snapshot (``host:pid:random``): the lease holder.
    holder: str | None = None
    #: Jobs that ended in the holder's tenure.
    jobs_ended: int | None = None
    #: What each extension reports of the scenario (``reef_scenario_status``), by extension
    #: name, as of the snapshot: Agent ECC's epoch in force and last seal under ``ecc``.
    extensions: JSONObject = attrs.field(factory=dict)


@attrs.frozen
class ScenarioStatus:
    """One scenario: its mode, its trainers and what it dropped as a whole."""

    scenario: str
    training_mode: TrainingMode
    trainers: tuple[TrainerStatus, ...]
    drops: Mapping[str, int]
    bodies_held: int
    evicted_bodies: int


@attrs.frozen
class StatusDocument:
    """``GET /reef/status``."""

    scenarios: tuple[ScenarioStatus, ...]


# -- reading and answering ---------------------------------------------------------------------


def _strict(kind: type[Any]) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _: Any) -> Any:
        # JSON already has the right types: a number where a string belongs is a mistake,
        # not something to convert.
        if type(value) is kind or (kind is float and type(value) is int):
            return value
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")

    return structure


def _body_converter(*, forbid_extra_keys: bool) -> cattrs.Converter:
    converter = make_converter(forbid_extra_keys=forbid_extra_keys)
    for kind in (str, int, float, bool):
        converter.register_structure_hook(kind, _strict(kind))
    return converter


_CONVERTER: Final = _body_converter(forbid_extra_keys=True)
# The OpenAI request has many keys Reef forwards without reading them.
_OPEN_CONVERTER: Final = _body_converter(forbid_extra_keys=False)


_QUOTED_NAME: Final = re.compile(r"'([A-Za-z_][A-Za-z0-9_]*)'")


def _problems(exc: BaseException, cls: type[Any]) -> list[ErrorDetail]:
    lines = describe(exc) if isinstance(exc, cattrs.BaseValidationError) else [str(exc)]
    names = {field.name for field in attrs.fields(cls)}
    found = []
    for line in lines:
        reason, _, field = line.rpartition(" @ ")
        reason, field = (reason, field) if reason else (line, "$")
        if field == "$":
            # An attrs validator's error names its attribute in quotes but has no path.
            named = [n for n in _QUOTED_NAME.findall(reason) if n in names]
            if named:
                field = f"$.{named[0]}"
        found.append(ErrorDetail(field, reason))
    return found or [ErrorDetail("$", str(exc))]


def structure(data: Any, cls: type[_T], *, open_keys: bool = False) -> _T:
    """``data`` (parsed JSON) as ``cls``, or a 400 naming every problem with its path.

    :param open_keys: keep keys ``cls`` does not name instead of refusing them (the OpenAI
        request, whose other keys are forwarded unread).
    """
    if not isinstance(data, dict):
        raise ApiError.one(400, "invalid_request", "$", "the body must be a JSON object")
    converter = _OPEN_CONVERTER if open_keys else _CONVERTER
    try:
        return converter.structure(data, cls)
    except (cattrs.BaseValidationError, TypeError, ValueError) as exc:
        raise ApiError(400, "invalid_request", _problems(exc, cls)) from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


async def read_json(request: Request, limit: int) -> Any:
    """The request's JSON body, read up to ``limit`` bytes (413 beyond, 400 when not JSON)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _too_large(limit)
    size = 0
    parts: list[bytes] = []
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _too_large(limit)
        parts.append(chunk)
    try:
        return json.loads(b"".join(parts), parse_constant=_refuse_constant)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError.one(400, "invalid_request", "$", f"the body is not JSON: {exc}") from None


def _too_large(limit: int) -> ApiError:
    return ApiError.one(413, "too_large", "$", f"the body is larger than {limit} bytes")


def unstructure(value: Any) -> Any:
    """An attrs value as JSON (dicts, lists, scalars)."""
    return _CONVERTER.unstructure(value)


def answer(value: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response of an attrs value."""
    return JSONResponse(unstructure(value), status, headers=dict(headers or {}))


def error_answer(error: ApiError) -> Response:
    """The answer to a refused request: an :class:`ErrorBody` with the error's status."""
    return answer(ErrorBody(error.code, str(error), error.problems), error.status)
