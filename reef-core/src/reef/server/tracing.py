"""OpenTelemetry spans of the service and its trainers (the ``otel`` extra; ``docs/observe.md``).

- :class:`RequestSpans` wraps the whole application (ASGI): each inference call
  (``POST .../chat/completions``, ``.../responses``, ``.../messages``) and each report
  (``POST .../reports``) is one span, a child of the agent's own span when the request carries
  a ``traceparent`` (W3C trace context, read by OpenTelemetry's propagator). The handlers add
  what they learn to it (:func:`note`): the scenario, the record or report id, the artifact
  that answered, the call's parent in its trajectory.
- :class:`JobTelemetry` hears of each job of this process's trainers
  (:class:`reef.train.trainer.TrainerObserver`): one span per job, with a child per step
  (reserve, submit, train, publish), and the job's figures for the metrics.

Spans go to the tracer provider the application was given, else to OpenTelemetry's global one
(which ``opentelemetry-instrument`` or the program configures). Without OpenTelemetry installed
there are no spans, and :func:`note` does nothing.
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reef.core.job_data import JobOutcome
from reef.version import __version__

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer, TracerProvider

    from reef.server.metrics import ServiceMetrics

__all__ = [
    "JobTelemetry",
    "RequestSpans",
    "note",
    "recording",
    "tracer_of",
    "tracing_available",
]

#: The path endings of the routes that get a span, and the span's name.
_TRACED: Final = (
    ("/chat/completions", "reef.inference"),
    ("/responses", "reef.inference"),
    ("/messages", "reef.inference"),
    ("/reports", "reef.report"),
)


@functools.cache
def tracing_available() -> bool:
    """Whether OpenTelemetry's API is installed."""
    return importlib.util.find_spec("opentelemetry") is not None


def tracer_of(provider: TracerProvider | None) -> Tracer | None:
    """Reef's tracer of ``provider`` (the global provider when ``None``); ``None`` without
    OpenTelemetry."""
    if not tracing_available():
        return None
    from opentelemetry import trace

    return (provider or trace.get_tracer_provider()).get_tracer("reef", __version__)


def recording() -> bool:
    """Whether the request has a span that records (so what only it needs is worth computing)."""
    if not tracing_available():
        return False
    from opentelemetry import trace

    return trace.get_current_span().is_recording()


def note(attributes: Mapping[str, str | None]) -> None:
    """Add ``attributes`` (those that are not ``None``) to the request's span, if it has one."""
    if not tracing_available():
        return
    from opentelemetry import trace

    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})


class RequestSpans:
    """ASGI middleware: the span of each inference call and report (the module docstring)."""

    def __init__(self, app: ASGIApp, *, tracer: Tracer) -> None:
        self.app = app
        self._tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = _span_name(scope)
        if name is None:
            await self.app(scope, receive, send)
            return
        from opentelemetry.propagate import extract
        from opentelemetry.trace import SpanKind, Status, StatusCode

        headers = {
            bytes(k).decode("latin-1"): bytes(v).decode("latin-1")
            for k, v in scope.get("headers", ())
        }
        with self._tracer.start_as_current_span(
            name,
            context=extract(headers),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": "POST", "url.path": scope["path"]},
        ) as span:

            async def sending(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status = int(message["status"])
                    span.set_attribute("http.response.status_code", status)
                    if status >= 500:
                        span.set_status(Status(StatusCode.ERROR))
                await send(message)

            await self.app(scope, receive, sending)


def _span_name(scope: Scope) -> str | None:
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    path = scope["path"].rstrip("/")
    return next((name for ending, name in _TRACED if path.endswith(ending)), None)


class JobTelemetry:
    """What hears of this process's trainers' jobs (:class:`reef.train.trainer.TrainerObserver`):
    their figures go to the metrics, their steps become spans.

    :param metrics: the application's metrics, if it has them.
    :param tracer: Reef's tracer, if OpenTelemetry is installed.
    """

    def __init__(self, metrics: ServiceMetrics | None, tracer: Tracer | None) -> None:
        self._metrics = metrics
        self._tracer = tracer
        self._lock = threading.Lock()
        # The steps of each job not ended yet: (step, started, ended), by trainer and job.
        self._steps: dict[tuple[str, str, str], list[tuple[str, float, float]]] = {}

    def job_step(
        self, scenario: str, trainer: str, job_id: str, step: str, started: float, ended: float
    ) -> None:
        with self._lock:
            self._steps.setdefault((scenario, trainer, job_id), []).append((step, started, ended))

    def job_ended(self, scenario: str, trainer: str, outcome: JobOutcome) -> None:
        with self._lock:
            steps = self._steps.pop((scenario, trainer, outcome.job_id), [])
        trained = [ended - started for step, started, ended in steps if step == "train"]
        if self._metrics is not None:
            self._metrics.job_ended(scenario, trainer, outcome, trained[0] if trained else None)
        if self._tracer is not None and steps:
            self._spans(scenario, trainer, outcome, steps)

    def _spans(
        self,
        scenario: str,
        trainer: str,
        outcome: JobOutcome,
        steps: list[tuple[str, float, float]],
    ) -> None:
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        assert self._tracer is not None
        attributes: dict[str, Any] = {
            "reef.scenario": scenario,
            "reef.trainer": trainer,
            "reef.job_id": outcome.job_id,
            "reef.job.outcome": outcome.event,
        }
        job = self._tracer.start_span(
            "reef.job", attributes=attributes, start_time=_ns(min(s for _, s, _ in steps))
        )
        if outcome.error is not None:
            job.set_status(Status(StatusCode.ERROR, outcome.error))
        parent = trace.set_span_in_context(job)
        for step, started, ended in steps:
            child = self._tracer.start_span(
                f"reef.job.{step}", context=parent, attributes=attributes, start_time=_ns(started)
            )
            child.end(end_time=_ns(ended))
        job.end(end_time=_ns(max(e for _, _, e in steps)))


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)
