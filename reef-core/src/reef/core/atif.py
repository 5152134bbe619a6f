"""ATIF v1.8 trajectories as frozen attrs values: read, written, and built from records.

ATIF (the Agent Trajectory Interchange Format, ``schema_version: "ATIF-v1.8"``) is how Reef
writes a sample's trajectory and how clients upload theirs. The classes mirror the public
format field for field, with the same constraints, so that what :func:`trajectory_to_json`
writes validates with the reference models, and what they write reads here without loss
(``docs/trajectories.md`` says exactly what compares equal).

Two differences of shape, none of content: sequences are tuples (values are immutable), and
ATIF's two media sources (image, audio) are one :class:`MediaSource` whose ``media_type`` says
which it is. Absent optional fields are ``None`` and are left out of the JSON form.

:func:`trajectory_from_records` builds the trajectory of linked OpenAI chat-completions calls;
it keeps, under ``extra["reef"]``, which record produced each step and with which artifact.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Literal, TypeAlias, get_args

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn

from reef.core.converters import describe, make_converter
from reef.core.records import CHAT_COMPLETIONS, JSON, InferenceRecord
from reef.core.trajectory_index import normalise_message
from reef.version import __version__

#: The ``schema_version`` Reef writes.
SCHEMA_VERSION: Final = "ATIF-v1.8"

StepSource: TypeAlias = Literal["system", "user", "agent"]
ContentPartType: TypeAlias = Literal["text", "image", "audio"]
ImageMediaType: TypeAlias = Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
AudioMediaType: TypeAlias = Literal[
    "audio/wav",
    "audio/mpeg",
    "audio/mp4",
    "audio/aac",
    "audio/ogg",
    "audio/flac",
    "audio/webm",
    "audio/aiff",
]
IMAGE_MEDIA_TYPES: Final = frozenset(get_args(ImageMediaType))
AUDIO_MEDIA_TYPES: Final = frozenset(get_args(AudioMediaType))

# Common spellings of audio types, read as ATIF reads them (its canonical type).
_AUDIO_ALIASES: Final = {
    "audio/mp3": "audio/mpeg",
    "audio/mpga": "audio/mpeg",
    "audio/x-mpeg": "audio/mpeg",
    "audio/x-wav": "audio/wav",
    "audio/wave": "audio/wav",
    "audio/vnd.wave": "audio/wav",
    "audio/x-m4a": "audio/mp4",
    "audio/m4a": "audio/mp4",
    "audio/x-aac": "audio/aac",
    "audio/x-flac": "audio/flac",
    "audio/x-aiff": "audio/aiff",
}

# Fields that only an agent step may carry.
_AGENT_ONLY: Final = (
    "model_name",
    "reasoning_effort",
    "reasoning_content",
    "tool_calls",
    "metrics",
)


class AtifFormatError(ValueError):
    """A value is not an ATIF v1.8 trajectory.

    ``path`` locates the first problem (``$.steps[2].message``) when known.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message if path is None else f"{message} @ {path}")
        self.path = path


class AtifBuildError(ValueError):
    """Inference records that do not make one trajectory (not chained, unsupported content)."""


def _canonical_media_type(value: str) -> str:
    normal = value.strip().lower()
    return _AUDIO_ALIASES.get(normal, normal)


# -- the format -------------------------------------------------------------------------------


@attrs.frozen
class MediaSource:
    """Where an image (``image/*``) or an audio clip (``audio/*``) of a content part lives.

    :ivar media_type: the MIME type; audio aliases (``audio/mp3``) read as their canonical type.
    :ivar path: a file path or URL.
    :ivar duration_sec: an audio clip's duration, when known (never on an image).
    """

    media_type: str = attrs.field(converter=_canonical_media_type)
    path: str
    duration_sec: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.media_type not in IMAGE_MEDIA_TYPES | AUDIO_MEDIA_TYPES:
            raise ValueError(f"unsupported media_type {self.media_type!r}")
        if self.duration_sec is not None:
            if self.media_type in IMAGE_MEDIA_TYPES:
                raise ValueError("an image source has no duration_sec")
            if not self.duration_sec >= 0:
                raise ValueError(f"duration_sec must be >= 0, got {self.duration_sec!r}")


@attrs.frozen
class ContentPart:
    """One part of a multimodal message: text, or an image or audio source."""

    type: ContentPartType
    text: str | None = None
    source: MediaSource | None = None

    def __attrs_post_init__(self) -> None:
        if self.type == "text":
            if self.text is None or self.source is not None:
                raise ValueError("a text part has text and no source")
            return
        if self.source is None or self.text is not None:
            raise ValueError(f"an {self.type} part has a source and no text")
        kinds = IMAGE_MEDIA_TYPES if self.type == "image" else AUDIO_MEDIA_TYPES
        if self.source.media_type not in kinds:
            raise ValueError(
                f"an {self.type} part cannot have media_type {self.source.media_type!r}"
            )


Content: TypeAlias = str | tuple[ContentPart, ...]


@attrs.frozen
class ToolCall:
    """An action of an agent step: a function call with its arguments (a JSON object)."""

    tool_call_id: str
    function_name: str
    arguments: JSON
    extra: JSON | None = None


@attrs.frozen
class SubagentTrajectoryRef:
    """A delegated subagent's trajectory: embedded (``trajectory_id``) or a file."""

    trajectory_id: str | None = None
    trajectory_path: str | None = None
    session_id: str | None = None
    extra: JSON | None = None

    def __attrs_post_init__(self) -> None:
        if self.trajectory_id is None and self.trajectory_path is None:
            raise ValueError("a subagent reference sets trajectory_id or trajectory_path")


@attrs.frozen
class ObservationResult:
    """One result an agent step observed: a tool's answer (``source_call_id``) or an event."""

    source_call_id: str | None = None
    content: Content | None = None
    subagent_trajectory_ref: tuple[SubagentTrajectoryRef, ...] | None = None
    extra: JSON | None = None


@attrs.frozen
class Observation:
    """What the environment answered after a step, one result per action or event."""

    results: tuple[ObservationResult, ...]


@attrs.frozen
class Metrics:
    """One agent step's LLM figures: token counts, cost, token ids and log probabilities."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    cost_usd: float | None = None
    prompt_token_ids: tuple[int, ...] | None = None
    completion_token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None
    extra: JSON | None = None


@attrs.frozen
class FinalMetrics:
    """The trajectory's totals."""

    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_cached_tokens: int | None = None
    total_cost_usd: float | None = None
    total_steps: int | None = None
    extra: JSON | None = None


@attrs.frozen
class Step:
    """One turn: a system prompt, a user message, or an agent turn with its actions.

    The agent-only fields (``model_name``, ``reasoning_effort``, ``reasoning_content``,
    ``tool_calls``, ``metrics``) are refused on other steps; ``is_copied_context`` marks a
    step copied from earlier context, which SFT must not train.
    """

    step_id: int
    source: StepSource
    message: Content
    timestamp: str | None = None
    model_name: str | None = None
    reasoning_effort: str | float | None = None
    reasoning_content: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    observation: Observation | None = None
    metrics: Metrics | None = None
    extra: JSON | None = None
    llm_call_count: int | None = None
    is_copied_context: bool | None = None

    def __attrs_post_init__(self) -> None:
        if self.step_id < 1:
            raise ValueError(f"step_id must be >= 1, got {self.step_id}")
        if self.timestamp is not None:
            try:
                datetime.fromisoformat(self.timestamp.replace("Z", "+00:00"))
            except ValueError:
                raise ValueError(f"timestamp must be ISO 8601, got {self.timestamp!r}") from None
        if self.source != "agent":
            for name in _AGENT_ONLY:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} is only valid on an agent step, not {self.source!r}")
        if self.llm_call_count is not None and self.llm_call_count < 0:
            raise ValueError(f"llm_call_count must be >= 0, got {self.llm_call_count}")
        silent = self.metrics is not None or self.reasoning_content is not None
        if self.source == "agent" and self.llm_call_count == 0 and silent:
            raise ValueError("an agent step with llm_call_count 0 has no metrics or reasoning")
        if self.observation is not None and self.tool_calls is not None:
            call_ids = {call.tool_call_id for call in self.tool_calls}
            for result in self.observation.results:
                if result.source_call_id is not None and result.source_call_id not in call_ids:
                    raise ValueError(
                        f"observation result for {result.source_call_id!r} answers no tool call"
                        f" of step {self.step_id}"
                    )


@attrs.frozen
class Agent:
    """The agent system that produced a trajectory, its default model and its tools."""

    name: str
    version: str
    model_name: str | None = None
    tool_definitions: tuple[JSON, ...] | None = None
    extra: JSON | None = None


@attrs.frozen
class Trajectory:
    """An ATIF trajectory: an agent's steps, in turn order, numbered from 1.

    ``extra["reef"]`` holds what Reef adds (the records a trajectory was built from, a
    sample's reward); embedded subagent trajectories carry distinct ``trajectory_id`` values.
    """

    schema_version: str
    agent: Agent
    steps: tuple[Step, ...]
    session_id: str | None = None
    trajectory_id: str | None = None
    notes: str | None = None
    final_metrics: FinalMetrics | None = None
    continued_trajectory_ref: str | None = None
    extra: JSON | None = None
    subagent_trajectories: tuple[Trajectory, ...] | None = None

    def __attrs_post_init__(self) -> None:
        for index, step in enumerate(self.steps, start=1):
            if step.step_id != index:
                raise ValueError(
                    f"steps[{index - 1}].step_id is {step.step_id}, expected {index} (sequential)"
                )
        seen: set[str] = set()
        for index, sub in enumerate(self.subagent_trajectories or ()):
            if sub.trajectory_id is None:
                raise ValueError(f"subagent_trajectories[{index}] needs a trajectory_id")
            if sub.trajectory_id in seen:
                raise ValueError(f"subagent_trajectories[{index}]: duplicate {sub.trajectory_id!r}")
            seen.add(sub.trajectory_id)


# -- JSON -------------------------------------------------------------------------------------

_CLASSES: Final = (
    MediaSource,
    ContentPart,
    ToolCall,
    SubagentTrajectoryRef,
    ObservationResult,
    Observation,
    Metrics,
    FinalMetrics,
    Step,
    Agent,
    Trajectory,
)


def _structure_content(value: Any, kind: Any) -> Content | None:
    if value is None and type(None) in get_args(kind):
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return _converter.structure(value, tuple[ContentPart, ...])
    raise TypeError("expected text or a list of content parts")


def _structure_literal(value: Any, kind: Any) -> Any:
    if value not in get_args(kind) or isinstance(value, bool):
        allowed = ", ".join(repr(v) for v in get_args(kind))
        raise ValueError(f"expected one of {allowed}, got {value!r}")
    return value


def _structure_strict(kind: type[Any]) -> Any:
    # JSON's types as ATIF reads them: no bool for a number, no number for text.
    def structure(value: Any, _: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {kind.__name__}, got a boolean")
        if kind is float and isinstance(value, int | float):
            if not math.isfinite(value):
                raise ValueError(f"expected a finite number, got {value!r}")
            return float(value)
        if not isinstance(value, kind):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__}")
        return value

    return structure


def _make_atif_converter() -> cattrs.Converter:
    converter = make_converter()
    for kind in (str, int, float, bool):
        converter.register_structure_hook(kind, _structure_strict(kind))
    # Unions and literals by predicate: annotations resolve to typing.Union, not `|` objects.
    contents = {frozenset(get_args(Content)), frozenset(get_args(Content | None))}
    converter.register_structure_hook_func(
        lambda t: frozenset(get_args(t)) in contents, _structure_content
    )
    converter.register_structure_hook_func(
        lambda t: getattr(t, "__origin__", None) is Literal, _structure_literal
    )
    for cls in _CLASSES:
        # Absent optional fields (all default to None) are left out, as ATIF writers do.
        converter.register_unstructure_hook(
            cls, make_dict_unstructure_fn(cls, converter, _cattrs_omit_if_default=True)
        )
    return converter


_converter = _make_atif_converter()


def trajectory_from_json(obj: Any) -> Trajectory:
    """Read an ATIF v1.8 trajectory from its JSON value (a dict), checking every constraint.

    :raises AtifFormatError: naming the path and the reason of each problem.
    """
    if not isinstance(obj, Mapping):
        raise AtifFormatError("an ATIF trajectory must be a JSON object", path="$")
    try:
        trajectory: Trajectory = _converter.structure(dict(obj), Trajectory)
    except cattrs.BaseValidationError as exc:
        raise AtifFormatError("; ".join(describe(exc))) from exc
    except (TypeError, ValueError) as exc:
        raise AtifFormatError(str(exc), path="$") from exc
    return trajectory


def trajectory_to_json(trajectory: Trajectory) -> JSON:
    """The JSON value of ``trajectory``: fields in ATIF's order, absent fields left out.

    Equal trajectories give equal values; ``json.dumps(..., sort_keys=True)`` of it is stable.
    """
    body: JSON = _converter.unstructure(trajectory)
    return body


# -- built from inference records -------------------------------------------------------------

_DATA_URL = re.compile(r"^data:(?P<type>[\w.+-]+/[\w.+-]+)[;,]")
_IMAGE_SUFFIXES: Final = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}


def trajectory_from_records(
    records: Sequence[InferenceRecord],
    *,
    trajectory_id: str,
    agent_name: str = "reef",
    agent_version: str = __version__,
    session_id: str | None = None,
    keep_tokens: bool = False,
) -> Trajectory:
    """The ATIF trajectory of the calls of one trajectory, root first, last call last.

    The conversation is the last call's request followed by its reply (the first choice):
    system and user messages become system and user steps, each assistant message an agent
    step with its tool calls, and each tool message an observation result of the agent step
    whose call it answers. An agent step made by one of ``records`` keeps that call's model,
    end time and token counts (when the response has them), and under
    ``extra["reef"]`` the record id, artifact id and finish reason; an assistant message no
    record made (context the client wrote) is ``is_copied_context``. The trajectory's
    ``extra["reef"]["records"]`` lists every call, in order, with its artifact.

    A sample holds no tokens and no log probabilities (P-REND-1): token ids and log
    probabilities that an engine returned are kept only with ``keep_tokens=True``, for a
    caller that reads them (diagnostics, an exported trace), never for a training sample.

    :raises AtifBuildError: when the records are not OpenAI chat-completions calls whose
        requests extend one another, or a message cannot be expressed in ATIF.
    """
    if not records:
        raise AtifBuildError("a trajectory needs at least one inference record")
    _check_chained(records)
    last = records[-1]
    conversation = list(last.messages)
    replies = last.reply_messages
    if replies:
        conversation.append(replies[0])
    # The assistant message a call produced sits right after that call's request.
    made_by = {len(record.messages): record for record in records}
    steps: list[Step] = []
    for position, message in enumerate(conversation):
        where = f"record {last.id!r}, message {position}"
        if not isinstance(message, Mapping):
            raise AtifBuildError(f"{where}: a message must be an object")
        role = message.get("role")
        if role == "tool":
            steps[-1:] = [_observe(steps, message, where)]
            continue
        if role == "assistant":
            record = made_by.get(position)
            step = _agent_step(len(steps) + 1, message, record, where)
            if not keep_tokens and step.metrics is not None:
                step = attrs.evolve(step, metrics=_without_tokens(step.metrics))
            steps.append(step)
        elif role in ("system", "developer", "user"):
            source: StepSource = "user" if role == "user" else "system"
            steps.append(Step(len(steps) + 1, source, _content(message.get("content"), where)))
        else:
            raise AtifBuildError(f"{where}: unsupported role {role!r}")
    metrics = [step.metrics for step in steps if step.metrics is not None]
    return Trajectory(
        schema_version=SCHEMA_VERSION,
        session_id=session_id,
        trajectory_id=trajectory_id,
        agent=Agent(
            name=agent_name,
            version=agent_version,
            model_name=_model_name(last),
            tool_definitions=tuple(last.tools) or None,
        ),
        steps=tuple(steps),
        final_metrics=FinalMetrics(
            total_prompt_tokens=_total(m.prompt_tokens for m in metrics),
            total_completion_tokens=_total(m.completion_tokens for m in metrics),
            total_cached_tokens=_total(m.cached_tokens for m in metrics),
            total_steps=len(steps),
        ),
        extra={
            "reef": {
                "scenario": last.scenario,
                "artifact_id": last.artifact_id,
                "records": [{"id": r.id, "artifact_id": r.artifact_id} for r in records],
            }
        },
    )


def _check_chained(records: Sequence[InferenceRecord]) -> None:
    previous: InferenceRecord | None = None
    for record in records:
        if record.api_format != CHAT_COMPLETIONS:
            raise AtifBuildError(
                f"record {record.id!r} has API format {record.api_format!r};"
                f" only {CHAT_COMPLETIONS!r} builds an ATIF trajectory"
            )
        if previous is not None:
            before = [normalise_message(m) for m in previous.messages]
            after = [normalise_message(m) for m in record.messages]
            if len(before) >= len(after) or after[: len(before)] != before:
                raise AtifBuildError(
                    f"record {record.id!r} does not extend the request of {previous.id!r}:"
                    " the records are not one trajectory, root first"
                )
        previous = record


def _total(values: Any) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _model_name(record: InferenceRecord) -> str | None:
    model = (record.response or {}).get("model") or record.request.get("model")
    return model if isinstance(model, str) else None


def _content(content: Any, where: str) -> Content:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise AtifBuildError(f"{where}: content must be text or a list of parts")
    return tuple(_content_part(part, where) for part in content)


def _content_part(part: Any, where: str) -> ContentPart:
    kind = part.get("type") if isinstance(part, Mapping) else None
    if kind == "text" and isinstance(part.get("text"), str):
        return ContentPart("text", text=part["text"])
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else image
        if isinstance(url, str):
            data = _DATA_URL.match(url)
            suffix = next((s for s in _IMAGE_SUFFIXES if url.lower().endswith(s)), None)
            media_type = data["type"] if data else _IMAGE_SUFFIXES.get(suffix or "")
            if media_type is not None and media_type in IMAGE_MEDIA_TYPES:
                return ContentPart("image", source=MediaSource(media_type, url))
    raise AtifBuildError(f"{where}: content part {kind!r} has no ATIF form")


def _tool_call(call: Any, where: str) -> ToolCall:
    if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
        raise AtifBuildError(f"{where}: a tool call needs a function")
    if not isinstance(call.get("id"), str):
        raise AtifBuildError(f"{where}: a tool call needs an id")
    function = call["function"]
    text = function.get("arguments")
    try:
        arguments = json.loads(text) if isinstance(text, str) and text.strip() else text or {}
    except json.JSONDecodeError:
        arguments = None
    extra = None
    if not isinstance(arguments, dict):
        # ATIF wants an object; keep what the model wrote so nothing is lost.
        arguments, extra = {}, {"reef": {"arguments_text": text}}
    return ToolCall(call["id"], str(function.get("name")), arguments, extra)


def _agent_step(
    step_id: int, message: Mapping[str, Any], record: InferenceRecord | None, where: str
) -> Step:
    calls = message.get("tool_calls") or []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    step = Step(
        step_id,
        "agent",
        _content(message.get("content"), where),
        reasoning_content=reasoning if isinstance(reasoning, str) else None,
        tool_calls=tuple(_tool_call(c, where) for c in calls) or None,
    )
    if record is None:
        return attrs.evolve(step, is_copied_context=True)
    choice = ((record.response or {}).get("choices") or [{}])[0]
    effort = record.request.get("reasoning_effort")
    return attrs.evolve(
        step,
        timestamp=(
            datetime.fromtimestamp(record.ended_at, UTC).isoformat() if record.ended_at else None
        ),
        model_name=_model_name(record),
        reasoning_effort=effort if isinstance(effort, str | float) else None,
        metrics=_metrics(record.response or {}, choice),
        extra={
            "reef": {
                "record_id": record.id,
                "artifact_id": record.artifact_id,
                "finish_reason": choice.get("finish_reason") if isinstance(choice, dict) else None,
            }
        },
    )


def _metrics(response: Mapping[str, Any], choice: Any) -> Metrics | None:
    usage = response.get("usage")
    usage = dict(usage) if isinstance(usage, Mapping) else {}
    details = usage.pop("prompt_tokens_details", None)
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    logprobs = choice.get("logprobs") if isinstance(choice, Mapping) else None
    tokens = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    token_ids = choice.get("token_ids") if isinstance(choice, Mapping) else None
    prompt_ids = response.get("prompt_token_ids")
    metrics = Metrics(
        prompt_tokens=usage.pop("prompt_tokens", None),
        completion_tokens=usage.pop("completion_tokens", None),
        cached_tokens=cached,
        prompt_token_ids=tuple(prompt_ids) if isinstance(prompt_ids, list) else None,
        completion_token_ids=tuple(token_ids) if isinstance(token_ids, list) else None,
        logprobs=tuple(t["logprob"] for t in tokens) if isinstance(tokens, list) else None,
        extra={k: v for k, v in usage.items() if k != "total_tokens" and v is not None} or None,
    )
    return None if metrics == Metrics() else metrics


def _without_tokens(metrics: Metrics) -> Metrics | None:
    counts = attrs.evolve(metrics, prompt_token_ids=None, completion_token_ids=None, logprobs=None)
    return None if counts == Metrics() else counts


def _observe(steps: list[Step], message: Mapping[str, Any], where: str) -> Step:
    """The last step, with the tool message ``message`` added to its observation."""
    call_id = message.get("tool_call_id")
    agent = steps[-1] if steps and steps[-1].source == "agent" else None
    calls = {c.tool_call_id for c in (agent.tool_calls or ())} if agent else set()
    if agent is None or call_id not in calls:
        raise AtifBuildError(f"{where}: tool result {call_id!r} answers no call of the agent step")
    result = ObservationResult(
        source_call_id=call_id, content=_content(message.get("content"), where)
    )
    earlier = agent.observation.results if agent.observation else ()
    return attrs.evolve(agent, observation=Observation((*earlier, result)))
