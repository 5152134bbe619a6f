"""The request and response bodies of the HTTP API, as frozen attrs values.

Every body the service reads is structured with cattrs into one of these classes (unknown keys
refused, each problem with its JSON path), and every body it writes is unstructured from one,
so the OpenAPI document (:mod:`reef.server.openapi`) is generated from the very types the
routes use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import attrs

from reef.pipeline_context import TrainingMode

JSONObject = dict[str, Any]


@attrs.frozen
class ErrorDetail:
    """What is wrong with a request.

    :ivar field: where: a JSON path into the body (``$.references[1]``), a header name, or a
        path parameter.
    :ivar reason: what is wrong, in words a client can act on.
    """

    field: str
    reason: str


@attrs.frozen
class ErrorBody:
    """The body of every 4xx (and 5xx) answer.

    :ivar error: a short code (``invalid_request``, ``unauthorized``, ``conflict``, ...).
    :ivar message: the first problem as one line.
    :ivar problems: every problem found.
    """

    error: str
    message: str
    problems: tuple[ErrorDetail, ...] = ()


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
