"""``DistillSamples``: the shared record-to-sample stage of the distilling recipes (P-LAYOUT-3).

On-policy distillation trains the student on its own sampled replies, scored token by token by
a teacher. The stage is a :class:`ReportSamples`: each report's sample is the student's call
(the report's last referenced call, its earlier turns copied context, built by
:class:`SampleAssembly`), with a teacher request in the trajectory's ``extra.reef.teacher``.
The training component renders that request into the teacher sequence
(:mod:`reef.core.teacher_rendering`) and asks the teacher for its log probabilities.

The teacher request is composed from the recorded request (:func:`compose_teacher_request`):
its messages, tools and chat template arguments (a Responses or Messages call's read as chat
messages, ``docs/api-formats.md#training``), with the report's ``metadata.teacher_context``
(text the teacher knows and the student did not see: the answer, a hint, the user's later
correction) added to the end of the last user message. A report's ``metadata.teacher_request``
replaces the composed request outright (a request without ``messages``: the teacher scores the
student's own tokens). The report's score, when it has one, is the sample's reward, for an
objective that trains the task reward beside the teacher's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Final

import attrs

from reef.core.api_formats import CHAT_COMPLETIONS, chat_tools
from reef.core.atif_build import chain_of, chat_requests
from reef.core.config import config_option
from reef.core.job_data import TrajectorySample
from reef.core.plugins import PluginSettings, Record2SampleSettings
from reef.core.records import JSON, InferenceRecord
from reef.pipeline_context import PipelineContext
from reef.record2sample.assembly import SampleAssembly
from reef.record2sample.record_sets import ReportContext, ReportError
from reef.record2sample.reports import ReportSamples

#: The report metadata key of the text only the teacher sees.
TEACHER_CONTEXT_KEY: Final = "teacher_context"
#: The report metadata key of a teacher request that replaces the composed one.
TEACHER_REQUEST_KEY: Final = "teacher_request"

#: What a teacher request keeps of the recorded request: what its prompt renders from.
_PROMPT_KEYS: Final = ("messages", "tools", "chat_template_kwargs")


def _with_context(message: Mapping[str, Any], context: str) -> JSON:
    content = message.get("content")
    if isinstance(content, list):
        return {**message, "content": [*content, {"type": "text", "text": f"\n\n{context}"}]}
    text = content if isinstance(content, str) else ""
    return {**message, "content": f"{text}\n\n{context}" if text else context}


def compose_teacher_request(
    request: Mapping[str, Any] | InferenceRecord,
    *,
    context: str | None = None,
    override: Mapping[str, Any] | None = None,
    max_tokens: int | None = None,
    calls: Sequence[InferenceRecord] = (),
) -> JSON:
    """The teacher request of a student's call whose recorded request is ``request``.

    :param request: a chat-completions request, or the student's call itself: its request as
        chat (:func:`chat_request_of`), whatever its API format.
    :param context: text only the teacher sees, added to the end of the last user message (or
        as a user message after the others when there is none), as OpenClaw-RL adds its hints.
    :param override: a teacher request that replaces the composed one (``context`` unused).
    :param max_tokens: the longest teacher sequence, when the request sets none (P-REND-5).
    :param calls: the call's trajectory, oldest first: what a chained Responses call resolves
        through.
    :returns: a request of ``messages``, ``tools`` and ``chat_template_kwargs`` (sampling
        parameters do not change a prompt) and ``max_tokens``.
    :raises AtifBuildError: for a chained Responses call whose chain is not in ``calls``.
    """
    if isinstance(request, InferenceRecord):
        request = chat_request_of(request, calls)
    if override is not None:
        composed = dict(override)
    else:
        composed = {key: request[key] for key in _PROMPT_KEYS if request.get(key) is not None}
        messages = [dict(m) for m in composed.get("messages") or []]
        if context:
            users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
            if users:
                messages[users[-1]] = _with_context(messages[users[-1]], context)
            else:
                messages.append({"role": "user", "content": context})
        if messages:
            composed["messages"] = messages
    if max_tokens is not None:
        composed.setdefault("max_tokens", max_tokens)
    return composed


def chat_request_of(call: InferenceRecord, calls: Sequence[InferenceRecord] = ()) -> JSON:
    """``call``'s request as chat completions: a chat call's as recorded; a Responses or
    Messages call's messages (system prompt first), tools and chat template arguments read as
    chat, a chained Responses call's resolved through ``calls`` (its trajectory, oldest first).

    :raises AtifBuildError: for a chained call whose chain is not in ``calls``.
    """
    if call.api_format == CHAT_COMPLETIONS:
        return dict(call.request)
    chat: JSON = {"messages": chat_requests(chain_of(call, calls))[-1]}
    tools = chat_tools(call.api_format, call.tools)
    if tools:
        chat["tools"] = tools
    if call.request.get("chat_template_kwargs") is not None:
        chat["chat_template_kwargs"] = call.request["chat_template_kwargs"]
    return chat


def with_teacher(
    sample: TrajectorySample,
    *,
    teacher: Mapping[str, Any] | None = None,
    candidates: Sequence[Mapping[str, Any]] | None = None,
) -> TrajectorySample:
    """``sample`` with a teacher request in its trajectory's ``extra.reef.teacher`` and, when
    given, one teacher request per hint in ``extra.reef.teacher_candidates`` (P-REND-4); the
    rest of the trajectory unchanged."""
    trajectory = dict(sample.trajectory)
    extra = dict(trajectory.get("extra") or {})
    reef = dict(extra.get("reef") or {})
    if teacher is not None:
        reef["teacher"] = dict(teacher)
    if candidates is not None:
        reef["teacher_candidates"] = [dict(c) for c in candidates]
    extra["reef"] = reef
    trajectory["extra"] = extra
    return attrs.evolve(sample, trajectory=trajectory)


@attrs.frozen
class DistillSamplesSettings(Record2SampleSettings):
    """The keys of :class:`DistillSamples`."""

    teacher_max_tokens: int | None = config_option(
        None,
        help="the longest teacher sequence (teacher prompt and the student's reply); a longer "
        "one is left out of its job and counted in unrenderable_samples",
        validator=attrs.validators.optional(attrs.validators.gt(0)),
    )


class DistillSamples(ReportSamples):
    """The student's call with its teacher request, one sample per report (see the module's
    documentation).

    :param context: the pipeline's context.
    :param teacher_max_tokens: written into each teacher request that sets no ``max_tokens``.
    :param max_staleness: see :class:`reef.record2sample.stage.Record2Sample`.
    """

    Settings: ClassVar[type[PluginSettings]] = DistillSamplesSettings

    def __init__(
        self,
        context: PipelineContext,
        *,
        teacher_max_tokens: int | None = None,
        max_staleness: int = 0,
    ) -> None:
        super().__init__(context, max_staleness=max_staleness)
        self.teacher_max_tokens = teacher_max_tokens

    def make_sample(self, context: ReportContext) -> TrajectorySample:
        """The student's last referenced call with its teacher request (P-LAYOUT-3).

        :raises ReportError: for a ``teacher_context`` that is not text or a
            ``teacher_request`` that is not an object (the report stays unprocessed, P-REP-14).
        """
        report = context.report
        teacher_context = report.metadata.get(TEACHER_CONTEXT_KEY)
        if teacher_context is not None and not isinstance(teacher_context, str):
            raise ReportError(
                f"report {report.id!r}: metadata.{TEACHER_CONTEXT_KEY} must be text, got "
                f"{type(teacher_context).__name__}"
            )
        override = report.metadata.get(TEACHER_REQUEST_KEY)
        if override is not None and not isinstance(override, Mapping):
            raise ReportError(
                f"report {report.id!r}: metadata.{TEACHER_REQUEST_KEY} must be a request "
                f"object, got {type(override).__name__}"
            )
        sample = SampleAssembly().build(context)
        teacher = compose_teacher_request(
            context.ends[-1],
            calls=context.inferences,
            context=teacher_context,
            override=override,
            max_tokens=self.teacher_max_tokens,
        )
        return with_teacher(sample, teacher=teacher)
