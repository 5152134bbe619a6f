"""Rendering a distillation sample's teacher sequence (P-REND-4, P-REND-5).

A distilling stage writes a teacher request beside the student's call: the trajectory's
``extra.reef.teacher`` (one request), or ``extra.reef.teacher_candidates`` (one request per
hint, as OpenClaw-RL writes them). The training component renders the student's sample as
every sample (:mod:`reef.core.chat_rendering`), then the teacher sequence with
:func:`render_teacher`, and asks a teacher model for its log probability of each of the
student's trained tokens in that sequence:

- a teacher request **with** ``messages``: the teacher prompt (the request rendered with the
  chat template, its tools and ``chat_template_kwargs``, and the generation prompt) followed by
  the student's reply tokens, exactly as the student sampled them;
- a teacher request **without** ``messages`` (or no teacher request at all): the student's own
  tokens, so the teacher scores the reply in the prompt the student saw.

Whatever the request, the tokens a teacher sequence marks (loss mask 1), read in order, are the
student's trained tokens in order: the teacher's log probabilities line up one to one with the
student's. The student's token ids are scored as they are, so the teacher must share the
student's tokenizer. A teacher sequence longer than the teacher request's ``max_tokens`` (or
the teacher model's context) cannot be scored: :func:`render_teacher` raises
:class:`RenderError`, and the component leaves the sample out and counts it in
``unrenderable_samples``.

Nothing here needs PyTorch; the components share it, and so do the recipes that distil.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from reef.core.chat_rendering import ChatRenderer, RenderedSample, RenderedSequence, RenderError
from reef.core.records import JSON

#: The trajectory's ``extra.reef`` key of the teacher request of a distillation sample.
TEACHER_KEY: Final = "teacher"
#: The trajectory's ``extra.reef`` key of the teacher requests, one per hint.
TEACHER_CANDIDATES_KEY: Final = "teacher_candidates"


def _reef_extra(trajectory: Mapping[str, Any]) -> Mapping[str, Any]:
    extra = trajectory.get("extra")
    reef = extra.get("reef") if isinstance(extra, Mapping) else None
    return reef if isinstance(reef, Mapping) else {}


def _checked_request(value: Any, where: str) -> JSON:
    if not isinstance(value, Mapping):
        raise RenderError(f"{where} must be a request object, got {type(value).__name__}")
    messages = value.get("messages")
    if messages is not None and (not isinstance(messages, list) or not messages):
        raise RenderError(f"{where}.messages must be a non-empty list of chat messages")
    limit = value.get("max_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise RenderError(f"{where}.max_tokens must be a positive int, got {limit!r}")
    return dict(value)


def sample_teacher(trajectory: Mapping[str, Any]) -> JSON | None:
    """The trajectory's teacher request (``extra.reef.teacher``), or ``None`` without one.

    :raises RenderError: for a teacher request that is not one (not an object, empty
        ``messages``, a ``max_tokens`` that is not a positive int).
    """
    value = _reef_extra(trajectory).get(TEACHER_KEY)
    return None if value is None else _checked_request(value, f"extra.reef.{TEACHER_KEY}")


def sample_teacher_candidates(trajectory: Mapping[str, Any]) -> tuple[JSON, ...]:
    """The trajectory's teacher requests, one per hint (``extra.reef.teacher_candidates``),
    best first as the stage wrote them; empty without any.

    :raises RenderError: when the value is not a list of teacher requests.
    """
    where = f"extra.reef.{TEACHER_CANDIDATES_KEY}"
    values = _reef_extra(trajectory).get(TEACHER_CANDIDATES_KEY)
    if values is None:
        return ()
    if not isinstance(values, list):
        raise RenderError(f"{where} must be a list of requests, got {type(values).__name__}")
    return tuple(_checked_request(v, f"{where}[{i}]") for i, v in enumerate(values))


def trained_tokens(sample: RenderedSample) -> list[int]:
    """The tokens of ``sample`` that train (loss mask 1), in order: the student's reply tokens
    a teacher scores."""
    return [
        token
        for sequence in sample.sequences
        for token, trains in zip(sequence.token_ids, sequence.loss_mask, strict=True)
        if trains
    ]


def _reply_span(student: RenderedSample) -> tuple[int, ...]:
    """The tokens of the student's one trained reply.

    :raises RenderError: when the sample trains more than one reply, which a teacher prompt
        cannot precede.
    """
    spans: list[tuple[int, ...]] = []
    for sequence in student.sequences:
        span: list[int] = []
        for token, trains in zip(sequence.token_ids, sequence.loss_mask, strict=True):
            if trains:
                span.append(token)
            elif span:
                spans.append(tuple(span))
                span = []
        if span:
            spans.append(tuple(span))
    if len(spans) != 1:
        raise RenderError(
            f"a teacher prompt precedes one reply, and the sample trains {len(spans)}: a "
            "distillation sample is one call (its earlier turns copied context)"
        )
    return spans[0]


def _reply_temperature(student: RenderedSample) -> float:
    """The sampling temperature of the student's one trained reply (its first trained
    token's): the teacher sequence keeps it, for a teacher that is the student itself."""
    for sequence in student.sequences:
        for position, trains in enumerate(sequence.loss_mask):
            if trains:
                return 1.0 if sequence.temperatures is None else sequence.temperatures[position]
    return 1.0


def render_teacher(
    renderer: ChatRenderer,
    teacher: Mapping[str, Any] | None,
    student: RenderedSample,
    *,
    max_tokens: int | None = None,
) -> RenderedSample:
    """The teacher sequence of a sample whose student rendering is ``student`` (see the
    module's documentation).

    :param renderer: the renderer of the teacher's tokenizer, which is the student's.
    :param teacher: the teacher request (:func:`sample_teacher`, or one of
        :func:`sample_teacher_candidates`); ``None`` or one without ``messages``: the student's
        own tokens.
    :param max_tokens: the teacher model's limit (its context length); the request's own
        ``max_tokens`` applies too, whichever is smaller.
    :returns: the teacher's tokens, loss mask 1 on exactly the student's trained tokens.
    :raises RenderError: when the teacher prompt cannot render, the sample trains more than
        one reply under a teacher prompt, or the sequence is longer than a limit.
    """
    request = None if teacher is None else _checked_request(teacher, "the teacher request")
    if request is None or request.get("messages") is None:
        rendered = student
    else:
        prompt = renderer.prompt_ids(request)
        reply = _reply_span(student)
        temperature = _reply_temperature(student)
        rendered = RenderedSample(
            (
                RenderedSequence(
                    (*prompt, *reply),
                    (0,) * len(prompt) + (1,) * len(reply),
                    None
                    if temperature == 1.0
                    else (1.0,) * len(prompt) + (temperature,) * len(reply),
                ),
            )
        )
    limits = [v for v in (max_tokens, None if request is None else request.get("max_tokens")) if v]
    if limits and rendered.num_tokens > min(limits):
        raise RenderError(
            f"the teacher sequence renders to {rendered.num_tokens} tokens, more than its "
            f"limit of {min(limits)}"
        )
    return rendered
