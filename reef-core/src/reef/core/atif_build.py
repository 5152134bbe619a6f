"""ATIF trajectories built from inference records: :func:`trajectory_from_records`.

The calls of one trajectory (root first, each request extending the one before) become one
ATIF trajectory (:mod:`reef.core.atif`). Each agent step keeps, under ``extra["reef"]``, which
record produced it and with which artifact, so a sample knows the artifact that made its data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import attrs

from reef.core.api_formats import (
    API_FORMATS,
    MESSAGES,
    RESPONSES,
    chat_messages,
    chat_tools,
    input_items,
    previous_response_id,
    resolved_request,
)
from reef.core.atif import (
    IMAGE_MEDIA_TYPES,
    SCHEMA_VERSION,
    Agent,
    Content,
    ContentPart,
    FinalMetrics,
    MediaSource,
    Metrics,
    Observation,
    ObservationResult,
    Step,
    StepSource,
    ToolCall,
    Trajectory,
)
from reef.core.records import JSON, InferenceRecord
from reef.core.trajectory_index import comparable_message
from reef.errors import ReefError
from reef.version import __version__


class AtifBuildError(ReefError, ValueError):
    """Inference records that do not make one trajectory (not chained, unsupported content)."""


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

    Every API format builds the same way, from its exchange read as chat messages
    (:mod:`reef.core.api_formats`); a chained Responses call's request is resolved through the
    calls before it. The conversation is the last call's request followed by its reply (the
    first choice):
    system and user messages become system and user steps, each assistant message an agent
    step with its tool calls, and each tool message an observation result of the agent step
    whose call it answers. An agent step made by one of ``records`` keeps that call's model,
    end time and token counts (when the response has them), and under
    ``extra["reef"]`` the record id, artifact id and finish reason; an assistant message no
    record made (context the client wrote) is ``is_copied_context``. The trajectory's
    ``extra["reef"]["records"]`` lists every call, in order, with its artifact.

    A sample holds no tokens and no log probabilities (P-REND-1): the token ids and log
    probabilities the engine returned (vLLM's and SGLang's ``return_token_ids``, OpenAI
    ``logprobs``; Reef asks every engine that gives them, and records them) are kept in the
    steps' ``metrics`` only with ``keep_tokens=True``: for diagnostics and exports, and for a
    recipe that opts into training them as they are (:mod:`reef.core.chat_rendering`,
    docs/decisions.md#trained-tokens-are-the-sampled-tokens).

    :raises AtifBuildError: when the records are not calls of one format whose requests
        extend one another, or a message cannot be expressed in ATIF.
    """
    if not records:
        raise AtifBuildError("a trajectory needs at least one inference record")
    requests = chat_requests(records)
    last = records[-1]
    conversation = list(requests[-1])
    replies = last.reply_messages
    if replies:
        conversation.append(replies[0])
    # The assistant message a call produced sits right after that call's request.
    made_by = {len(request): record for request, record in zip(requests, records, strict=True)}
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
            tool_definitions=tuple(chat_tools(last.api_format, last.tools)) or None,
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


def chain_of(
    call: InferenceRecord, calls: Sequence[InferenceRecord]
) -> tuple[InferenceRecord, ...]:
    """``call`` after the calls of ``calls`` it continues by ``previous_response_id``, oldest
    first: what its whole request is resolved through (``call`` alone when it is not chained).

    :raises AtifBuildError: when a call it continues is not in ``calls``.
    """
    chain = [call]
    by_id = {c.id: c for c in calls}
    while (previous := previous_response_id(chain[0].api_format, chain[0].request)) is not None:
        if previous not in by_id:
            raise AtifBuildError(
                f"record {call.id!r} continues response {previous!r}, which is not among the"
                " records of its trajectory"
            )
        chain.insert(0, by_id[previous])
    return tuple(chain)


def chat_requests(records: Sequence[InferenceRecord]) -> list[list[JSON]]:
    """Each record's whole request as chat messages (a chained Responses call's resolved
    through the records before it), once the records are checked to be one trajectory of one
    format, root first.

    :raises AtifBuildError: when they are not.
    """
    requests: list[list[JSON]] = []
    # The whole input of the previous Responses call, as items (what a chained call extends).
    items: list[Any] = []
    previous: InferenceRecord | None = None
    for record in records:
        if record.api_format not in API_FORMATS:
            raise AtifBuildError(
                f"record {record.id!r} has API format {record.api_format!r}; ATIF trajectories"
                f" are built from {', '.join(API_FORMATS)}"
            )
        if previous is not None and record.api_format != previous.api_format:
            raise AtifBuildError(
                f"record {record.id!r} has API format {record.api_format!r}, and"
                f" {previous.id!r} {previous.api_format!r}: a trajectory has one format"
            )
        chained = previous_response_id(record.api_format, record.request)
        if chained is not None and (previous is None or chained != previous.id):
            raise AtifBuildError(
                f"record {record.id!r} continues response {chained!r}, which is not the record"
                " before it: the records are not one trajectory, root first"
            )
        if record.api_format == RESPONSES:
            request = record.request
            if chained is not None and previous is not None:
                output = (previous.response or {}).get("output") or []
                request = resolved_request(record.request, items, output)
            items = input_items(request)
            messages = chat_messages(RESPONSES, request)
        else:
            messages = record.messages
        if previous is not None and chained is None:
            before = [comparable_message(m) for m in requests[-1]]
            after = [comparable_message(m) for m in messages]
            if len(before) >= len(after) or after[: len(before)] != before:
                raise AtifBuildError(
                    f"record {record.id!r} does not extend the request of {previous.id!r}:"
                    " the records are not one trajectory, root first"
                )
        requests.append(messages)
        previous = record
    return requests


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
    finish, metrics = _answer_facts(record)
    facts: JSON = {
        "record_id": record.id,
        "artifact_id": record.artifact_id,
        "finish_reason": finish,
    }
    temperature = _temperature(record)
    if temperature is not None:
        facts["temperature"] = temperature  # what the reply was sampled at: training scores at it
    return attrs.evolve(
        step,
        timestamp=(
            datetime.fromtimestamp(record.ended_at, UTC).isoformat() if record.ended_at else None
        ),
        model_name=_model_name(record),
        reasoning_effort=_reasoning_effort(record),
        metrics=metrics,
        extra={"reef": facts},
    )


def _temperature(record: InferenceRecord) -> float | None:
    """The request's sampling ``temperature`` (``None`` when it names none)."""
    value = record.request.get("temperature")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _reasoning_effort(record: InferenceRecord) -> str | float | None:
    effort = record.request.get("reasoning_effort")
    if record.api_format == RESPONSES:
        reasoning = record.request.get("reasoning")
        effort = reasoning.get("effort") if isinstance(reasoning, Mapping) else None
    return effort if isinstance(effort, str | float) else None


def _answer_facts(record: InferenceRecord) -> tuple[str | None, Metrics | None]:
    """How the call's answer ended, in its format's words (chat's ``finish_reason``, the
    Responses ``status`` or its incomplete reason, the Messages ``stop_reason``), and its
    token counts."""
    response = record.response or {}
    usage = response.get("usage")
    usage = usage if isinstance(usage, Mapping) else {}
    if record.api_format == RESPONSES:
        details = usage.get("input_tokens_details")
        incomplete = response.get("incomplete_details")
        reason = incomplete.get("reason") if isinstance(incomplete, Mapping) else None
        counts = Metrics(
            prompt_tokens=usage.get("input_tokens"),
            completion_tokens=usage.get("output_tokens"),
            cached_tokens=details.get("cached_tokens") if isinstance(details, Mapping) else None,
        )
        return reason or response.get("status"), None if counts == Metrics() else counts
    if record.api_format == MESSAGES:
        read = usage.get("cache_read_input_tokens")
        written = usage.get("cache_creation_input_tokens")
        given = usage.get("input_tokens")
        counts = Metrics(
            # Anthropic counts the cached part of the prompt apart from its input tokens.
            prompt_tokens=None if given is None else given + (read or 0) + (written or 0),
            completion_tokens=usage.get("output_tokens"),
            cached_tokens=read,
        )
        return response.get("stop_reason"), None if counts == Metrics() else counts
    choice = (response.get("choices") or [{}])[0]
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    return finish, _metrics(response, choice)


def _metrics(response: Mapping[str, Any], choice: Any) -> Metrics | None:
    usage = response.get("usage")
    usage = dict(usage) if isinstance(usage, Mapping) else {}
    details = usage.pop("prompt_tokens_details", None)
    cached = details.get("cached_tokens") if isinstance(details, Mapping) else None
    logprobs = choice.get("logprobs") if isinstance(choice, Mapping) else None
    tokens = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    token_ids = choice.get("token_ids") if isinstance(choice, Mapping) else None
    # vLLM gives the prompt's ids beside the choices, SGLang in each choice.
    prompt_ids = response.get("prompt_token_ids")
    if prompt_ids is None and isinstance(choice, Mapping):
        prompt_ids = choice.get("prompt_token_ids")
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
