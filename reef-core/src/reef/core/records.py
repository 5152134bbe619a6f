"""What Reef records: inference records, reports and judged records.

A record is an immutable value with a stable JSON form (``to_json`` / ``from_json``). It holds
the provider exchange as it happened and never any training tensor: rendering is the training
component's job. The JSON form carries a ``kind`` field so that a stored body can be read back
without knowing in advance which kind of record it is.

Records are frozen, but their JSON payloads (``request``, ``response``, ``metadata``) are plain
dicts: treat them as read-only. They are not hashable; index them by ``id``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, Final, Literal, TypeAlias

import attrs
import cattrs

from reef.core.api_formats import (
    API_FORMATS,
    CHAT_COMPLETIONS,
    JSON,
    MESSAGES,
    RESPONSES,
    chat_messages,
    chat_reply,
)
from reef.core.converters import describe, make_converter
from reef.errors import ReefError

__all__ = [
    "API_FORMATS",
    "CHAT_COMPLETIONS",
    "JSON",
    "MESSAGES",
    "RESPONSES",
    "TAG_HEADER_PREFIX",
    "InferenceRecord",
    "JudgedRecord",
    "Judgment",
    "Record",
    "RecordFormatError",
    "RecordKind",
    "Report",
    "dumps",
    "from_json",
    "has_eligibility_flag",
    "loads",
    "to_json",
]

#: Header prefix whose headers become an inference record's tags (``x-reef-tag-<name>``).
TAG_HEADER_PREFIX: Final = "x-reef-tag-"

RecordKind: TypeAlias = Literal["inference", "report", "judged"]


class RecordFormatError(ReefError, ValueError):
    """A stored or submitted record body does not have the shape of a record.

    ``path`` is the JSON path of the offending value (``$.references[1]``) when known.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message if path is None else f"{message} @ {path}")
        self.path = path


def _check_tag_name(_: object, __: attrs.Attribute[Any], tags: Mapping[str, str]) -> None:
    for name, value in tags.items():
        if not name or name != name.lower() or not isinstance(value, str):
            raise ValueError(f"tag {name!r} must be a non-empty lower-case name with a str value")


@attrs.frozen(eq=True)
class InferenceRecord:
    """One call to a model through Reef's inference service, as the provider saw it.

    :ivar id: the record's id, unique within the deployment.
    :ivar scenario: the scenario the call was made in.
    :ivar api_format: the provider API of the exchange (:data:`CHAT_COMPLETIONS`,
        :data:`RESPONSES`, :data:`MESSAGES`); request and response are in its form.
    :ivar request: the request body as the client sent it (messages, tools, sampling); a
        chained Responses request holds only its own turn.
    :ivar response: the full response body as the client got it (assembled from the events
        when streamed), or ``None`` when the engine answered nothing usable.
    :ivar artifact_id: the artifact (weights) that answered; ``None`` when unknown.
    :ivar tags: the ``x-reef-tag-<name>`` headers of the call, by ``<name>``.
    :ivar started_at: when Reef received the call (Unix seconds).
    :ivar ended_at: when the exchange ended (Unix seconds).
    :ivar aborted: Reef saw the engine break off the exchange (a broken stream, an error
        after the response started). See :attr:`is_engine_abort` for the full test.
    """

    id: str
    scenario: str
    request: JSON
    response: JSON | None
    api_format: str = CHAT_COMPLETIONS
    artifact_id: str | None = None
    tags: Mapping[str, str] = attrs.field(factory=dict, validator=_check_tag_name)
    started_at: float = 0.0
    ended_at: float = 0.0
    aborted: bool = False

    kind: RecordKind = attrs.field(default="inference", init=False)

    @property
    def messages(self) -> list[JSON]:
        """The input messages of the request (system prompt included), as chat messages
        whatever the format (:func:`reef.core.api_formats.chat_messages`)."""
        return chat_messages(self.api_format, self.request)

    @property
    def tools(self) -> list[JSON]:
        """The tools the request offered, in order (empty when none)."""
        tools = self.request.get("tools") or []
        return list(tools) if isinstance(tools, list) else []

    @property
    def reply_messages(self) -> list[JSON]:
        """The assistant message of each choice of the response, in choice order, as chat
        messages whatever the format (one for Responses and Messages)."""
        return chat_reply(self.api_format, self.response)

    @property
    def is_engine_abort(self) -> bool:
        """True when the engine aborted this exchange.

        That is when Reef marked the exchange aborted while recording it, or when any choice
        of a chat response finished with ``finish_reason == "abort"``, or a Responses
        response ended ``failed`` or ``cancelled``. The response is never altered by this
        test.
        """
        if self.aborted:
            return True
        if not self.response:
            return False
        if self.api_format == RESPONSES:
            return self.response.get("status") in ("failed", "cancelled")
        if self.api_format == MESSAGES:
            return False  # Reef marks it aborted: the format has no stop reason for it
        choices = self.response.get("choices") or []
        return any(isinstance(c, dict) and c.get("finish_reason") == "abort" for c in choices)


@attrs.frozen(eq=True)
class Report:
    """Feedback that scores one or more trajectories.

    A report references the last call of each trajectory it scores (by inference record id).

    :ivar id: the client's report id; a retry with the same id and content is the same report.
    :ivar scenario: the scenario of the referenced calls.
    :ivar references: ids of the referenced inference records, in the client's order.
    :ivar score: the reward; ``None`` for a report without a score (feedback only).
    :ivar feedback: free-text feedback, if any.
    :ivar metadata: the client's metadata, as JSON.
    :ivar created_at: when Reef admitted the report (Unix seconds).
    """

    id: str
    scenario: str
    references: tuple[str, ...] = attrs.field()
    score: float | None = attrs.field(default=None)
    feedback: str | None = None
    metadata: JSON = attrs.field(factory=dict)
    created_at: float = 0.0

    kind: RecordKind = attrs.field(default="report", init=False)

    @score.validator
    def _finite_score(self, _: attrs.Attribute[Any], score: float | None) -> None:
        if score is not None and not math.isfinite(score):
            raise ValueError(f"score must be a finite number, got {score!r}")

    @references.validator
    def _some_references(self, _: attrs.Attribute[Any], refs: tuple[str, ...]) -> None:
        if not refs:
            raise ValueError("a report references at least one inference record")

    def content_key(self) -> str:
        """The report's content as canonical JSON, without its admission time.

        Two submissions under one id are the same report exactly when their keys are equal.
        """
        body = to_json(self)
        body.pop("created_at")
        return json.dumps(body, sort_keys=True, separators=(",", ":"))


def has_eligibility_flag(metadata: Mapping[str, Any]) -> bool:
    """Whether report metadata carries ``training.eligible``, which no report may carry.

    Reports cannot opt in or out of training: admission refuses such a report, and a stored
    (legacy) one fails explicitly when it is replayed, whatever the flag's value.
    """
    training = metadata.get("training")
    return isinstance(training, Mapping) and "eligible" in training


@attrs.frozen(eq=True)
class Judgment:
    """The result of judging a record: a score, feedback and the judge's metadata."""

    score: float | None = None
    feedback: str | None = None
    metadata: JSON = attrs.field(factory=dict)


@attrs.frozen(eq=True)
class JudgedRecord:
    """A record whose feedback Reef computed (the computed-feedback path).

    :ivar id: the judged record's id.
    :ivar scenario: its scenario.
    :ivar record_id: the inference record that was judged.
    :ivar judgment: what the judge decided.
    :ivar judged_at: when the judgment ended (Unix seconds).
    """

    id: str
    scenario: str
    record_id: str
    judgment: Judgment
    judged_at: float = 0.0

    kind: RecordKind = attrs.field(default="judged", init=False)


Record: TypeAlias = InferenceRecord | Report | JudgedRecord

_CLASSES: Final[dict[str, type[InferenceRecord | Report | JudgedRecord]]] = {
    "inference": InferenceRecord,
    "report": Report,
    "judged": JudgedRecord,
}


_converter = make_converter()


def to_json(record: Record) -> JSON:
    """The stable JSON form of ``record`` (a dict of JSON values, with ``kind``)."""
    body: JSON = {"kind": record.kind}
    body.update(_converter.unstructure(record))
    return body


def from_json(body: Mapping[str, Any]) -> Record:
    """Read a record from its JSON form, refusing a body that is not one.

    :raises RecordFormatError: with the path and reason of the first problem.
    """
    if not isinstance(body, Mapping):
        raise RecordFormatError("a record must be a JSON object")
    kind = body.get("kind")
    cls = _CLASSES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise RecordFormatError(
            f"unknown record kind {kind!r} (expected one of {', '.join(_CLASSES)})",
            path="$.kind",
        )
    fields = {f.name for f in attrs.fields(cls) if f.init}
    values = {key: value for key, value in body.items() if key != "kind"}
    extra = sorted(set(values) - fields)
    if extra:
        raise RecordFormatError(
            f"unknown key {extra[0]!r} for a {kind} record", path=f"$.{extra[0]}"
        )
    try:
        record: Record = _converter.structure(values, cls)
    except cattrs.BaseValidationError as exc:
        raise RecordFormatError("; ".join(describe(exc))) from exc
    except (TypeError, ValueError) as exc:
        raise RecordFormatError(str(exc)) from exc
    return record


def dumps(record: Record) -> str:
    """``to_json`` as canonical text (sorted keys, no spaces): equal records, equal text."""
    return json.dumps(to_json(record), sort_keys=True, separators=(",", ":"))


def loads(text: str) -> Record:
    """Read a record from text written by :func:`dumps`."""
    return from_json(json.loads(text))
