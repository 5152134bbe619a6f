"""ATIF v1.8 trajectories as frozen attrs values, read from and written to JSON.

ATIF (the Agent Trajectory Interchange Format, ``schema_version: "ATIF-v1.8"``) is how Reef
writes a sample's trajectory and how clients upload theirs. The classes mirror the public
format field for field, with the same constraints, so that what :func:`trajectory_to_json`
writes validates with the reference models, and what they write reads here without loss
(``docs/trajectories.md`` says exactly what compares equal).

Two differences of shape, none of content: sequences are tuples (values are immutable), and
ATIF's two media sources (image, audio) are one :class:`MediaSource` whose ``media_type`` says
which it is. Absent optional fields are ``None`` and are left out of the JSON form.

Building a trajectory from inference records is :mod:`reef.core.atif_build`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final, Literal, TypeAlias, get_args

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn

from reef.core.converters import describe, strict_converter
from reef.core.records import JSON
from reef.errors import ReefError

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


class AtifFormatError(ReefError, ValueError):
    """A value is not an ATIF v1.8 trajectory.

    ``path`` locates the first problem (``$.steps[2].message``) when known.
    """

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message if path is None else f"{message} @ {path}")
        self.path = path


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


def _make_atif_converter() -> cattrs.Converter:
    # JSON's types as ATIF reads them; NaN could not be written back as JSON.
    converter = strict_converter(finite_floats=True)
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
