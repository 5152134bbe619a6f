"""The service's metrics in Prometheus' text format: ``GET /metrics`` (``docs/observe.md``).

:class:`ServiceMetrics` holds one application's registry (``prometheus-client``, the
``metrics`` extra, imported when the application is made): nothing is global, so two
applications in one process (two tests) count apart. What it measures comes from three places:

- **the requests**, as they pass: :class:`RequestMetrics` wraps the whole application (ASGI),
  counts each request by route, scenario, format and status, and times it to its last byte;
  the time its engine took is measured by :class:`TimedEngine` around each scenario's engine,
  so Reef's own part of an inference call is the rest;
- **the events of this process**: stream cuts, refusals, the ledger's transactions, the jobs
  its trainers end (:meth:`ServiceMetrics.job_ended`), its publishers' counts;
- **the stores**, read when Prometheus scrapes (:class:`StoreCollector`): each trainer's buffer,
  ready, stale and dropped samples, the artifact it serves, its lease. Several processes on one
  database each compute the same figures, so these carry a ``process`` label: which process
  computed them.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Final

import attrs
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reef.core.api_formats import MESSAGES, RESPONSES
from reef.core.records import CHAT_COMPLETIONS, JSON
from reef.engines.interface import ChatEngine, EngineAnswer, EngineStream
from reef.server.errors import ApiError
from reef.server.openapi import ApiRoute
from reef.server.service import service_of
from reef.server.status import scenario_status
from reef.storage import TrainerLeases

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from reef.core.job_data import JobOutcome
    from reef.core.records import InferenceRecord
    from reef.server.service import Service

__all__ = [
    "METRIC_NAMES",
    "ROUTES",
    "RequestMetrics",
    "ServiceMetrics",
    "StoreCollector",
    "TimedEngine",
    "metrics_available",
    "stream_cut",
]

#: The format label of each inference route (every other route's is ``""``).
_FORMATS: Final = {
    "/v1/chat/completions": "chat",
    "/scenarios/{scenario}/v1/chat/completions": "chat",
    "/v1/responses": "responses",
    "/scenarios/{scenario}/v1/responses": "responses",
    "/v1/messages": "messages",
    "/scenarios/{scenario}/v1/messages": "messages",
}

#: The format label of each API format a record names.
_FORMAT_LABELS: Final = {CHAT_COMPLETIONS: "chat", RESPONSES: "responses", MESSAGES: "messages"}

#: Latency buckets of a request or an engine call, in seconds.
_LATENCY: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
#: Buckets of a training job, in seconds.
_JOB: Final = (0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)


@attrs.define
class _Call:
    """What one request's measures gather on its way: the seconds its engine took."""

    engine_seconds: float = 0.0
    engine_called: bool = False


_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("reef_call", default=None)


def metrics_available() -> bool:
    """Whether ``prometheus-client`` is installed (the ``metrics`` extra)."""
    import importlib.util

    return importlib.util.find_spec("prometheus_client") is not None


def stream_cut(service: Service, record: InferenceRecord, reason: str) -> None:
    """Count a stream of ``record`` broken off (:meth:`ServiceMetrics.stream_cut`), where the
    service has metrics."""
    if service.metrics is not None:
        service.metrics.stream_cut(record.scenario, record.api_format, reason)


class ServiceMetrics:
    """One application's metrics (the module docstring). :param service: what the store
    gauges read. :raises ModuleNotFoundError: without ``prometheus-client``."""

    def __init__(self, service: Service) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.registry = CollectorRegistry(auto_describe=True)

        def counter(name: str, text: str, *labels: str) -> Counter:
            return Counter(name, text, labels, registry=self.registry)

        def histogram(name: str, text: str, buckets: tuple[float, ...], *labels: str) -> Histogram:
            return Histogram(name, text, labels, buckets=buckets, registry=self.registry)

        self.requests = counter(
            "reef_requests",
            "Requests answered, by route, scenario, format and status",
            "route",
            "method",
            "scenario",
            "format",
            "status",
        )
        self.request_seconds = histogram(
            "reef_request_duration_seconds",
            "Seconds from a request's arrival to its answer's last byte",
            _LATENCY,
            "route",
            "format",
        )
        self.engine_seconds = histogram(
            "reef_engine_duration_seconds",
            "Seconds an inference call waited for its engine",
            _LATENCY,
            "scenario",
            "format",
        )
        self.overhead_seconds = histogram(
            "reef_overhead_seconds",
            "Seconds of an inference call that were Reef's own (the whole call less the engine)",
            _LATENCY,
            "scenario",
            "format",
        )
        self.stream_cuts = counter(
            "reef_stream_cuts",
            "Streamed answers broken off, by who broke them off",
            "scenario",
            "format",
            "reason",
        )
        self.refusals = counter(
            "reef_refusals",
            "Requests refused before anything was stored, by route and reason",
            "route",
            "reason",
        )
        self.connections_dropped = counter(
            "reef_connections_dropped",
            "Connections the service's limits ended before a request reached it, by reason",
            "reason",
        )
        self.store_write_seconds = histogram(
            "reef_store_write_duration_seconds",
            "Seconds of each transaction of a scenario's ledger (calls and reports)",
            _LATENCY,
            "scenario",
        )
        self.store_write_failures = counter(
            "reef_store_write_failures", "Calls and reports the store could not take", "scenario"
        )
        self.jobs = counter(
            "reef_jobs",
            "Training jobs this process's trainers ended, by outcome",
            "scenario",
            "trainer",
            "outcome",
        )
        self.job_seconds = histogram(
            "reef_job_duration_seconds",
            "Seconds from a job's submission to its end",
            _JOB,
            "scenario",
            "trainer",
        )
        self.publication_seconds = histogram(
            "reef_publication_duration_seconds",
            "Seconds each publication of this process took to load into its engine",
            _JOB,
            "scenario",
        )
        self.trained_tokens = counter(
            "reef_trained_tokens",
            "Tokens this process's trainers trained on (the component's trained_tokens)",
            "scenario", "trainer",
        )  # fmt: skip
        self._scenarios = frozenset(service.scenarios)
        self.registry.register(StoreCollector(service))

    # -- the events -----------------------------------------------------------------------------

    def request_done(
        self, scope: Scope, call: _Call, status: int, seconds: float, scenario: str
    ) -> None:
        """One request answered (``scenario``: the one it named, ``""`` for none or one the
        deployment does not have: a client's name never becomes a series)."""
        route = scope.get("route")
        path = getattr(route, "path", "")
        api_format = _FORMATS.get(path, "")
        known = scenario if scenario in self._scenarios else ""
        self.requests.labels(path, scope["method"], known, api_format, str(status)).inc()
        self.request_seconds.labels(path, api_format).observe(seconds)
        if call.engine_called:
            self.engine_seconds.labels(known, api_format).observe(call.engine_seconds)
            self.overhead_seconds.labels(known, api_format).observe(
                max(0.0, seconds - call.engine_seconds)
            )

    def refused(self, request: Request, error: ApiError) -> None:
        """A request refused with ``error`` (its reason: the rules' reason of a refused report,
        else the error's code)."""
        route = getattr(request.scope.get("route"), "path", "")
        self.refusals.labels(route, getattr(error, "reason", error.code)).inc()

    def connection_dropped(self, reason: str) -> None:
        """A connection a limit ended (:mod:`reef.server.connections`): ``header_timeout``,
        ``body_timeout``, ``evicted`` or ``busy``."""
        self.connections_dropped.labels(reason).inc()

    def stream_cut(self, scenario: str, api_format: str, reason: str) -> None:
        """A streamed answer of ``api_format`` (a record's) broken off: ``engine_error`` (the
        engine failed mid-stream), ``engine_ended`` (it closed without its end),
        ``client_left``."""
        self.stream_cuts.labels(scenario, _FORMAT_LABELS[api_format], reason).inc()

    def store_write(self, scenario: str, seconds: float, failed: int) -> None:
        """One transaction of ``scenario``'s ledger: its seconds, and how many of its items the
        store could not take."""
        self.store_write_seconds.labels(scenario).observe(seconds)
        if failed:
            self.store_write_failures.labels(scenario).inc(failed)

    def job_ended(
        self, scenario: str, trainer: str, outcome: JobOutcome, seconds: float | None
    ) -> None:
        """A job this process's trainer ended (``seconds`` since its submission, ``None`` for a
        job a previous process submitted)."""
        self.jobs.labels(scenario, trainer, outcome.event).inc()
        if seconds is not None:
            self.job_seconds.labels(scenario, trainer).observe(seconds)
        tokens = outcome.metrics.get("trained_tokens")
        if isinstance(tokens, int | float) and not isinstance(tokens, bool) and tokens > 0:
            self.trained_tokens.labels(scenario, trainer).inc(tokens)

    def published(self, scenario: str, seconds: float) -> None:
        """This process put a new artifact of ``scenario`` into its engine in ``seconds``."""
        self.publication_seconds.labels(scenario).observe(seconds)

    def text(self) -> bytes:
        """Everything, in Prometheus' text format."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)


class StoreCollector:
    """The figures read from the stores and this process's publishers at each scrape (the
    module docstring); the store's carry the ``process`` label."""

    def __init__(self, service: Service) -> None:
        self._service = service

    def describe(self) -> list[Metric]:
        return []  # computed at each scrape; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

        service = self._service
        process = service.runtime.process()
        trainer_labels = ["process", "scenario", "trainer"]
        gauges = {
            key: GaugeMetricFamily(name, text, labels=trainer_labels)
            for key, name, text in (
                ("ready", "reef_trainer_ready_samples", "Samples ready to go into a job"),
                ("buffer", "reef_trainer_buffer_samples", "The samples a job takes"),
                ("stale", "reef_trainer_stale_samples", "Samples left out of the buffer as stale"),
                ("held", "reef_trainer_held_with_stale_samples",
                 "Fresh samples held out with a stale group-mate"),
                ("pending", "reef_trainer_pending_instructions", "Instructions not consumed yet"),
                ("manual", "reef_trainer_manual_buffer_samples", "Samples in the manual buffer"),
            )
        }  # fmt: skip
        dropped = CounterMetricFamily(
            "reef_dropped_samples",
            'Samples and records dropped without training, by reason (trainer "": the scenario\'s)',
            labels=[*trainer_labels, "reason"],
        )
        served = InfoMetricFamily(
            "reef_served_artifact", "The artifact each trainer serves", labels=trainer_labels
        )
        holder = InfoMetricFamily(
            "reef_trainer_lease", "The process that holds each trainer's lease",
            labels=trainer_labels,
        )  # fmt: skip
        takeovers = CounterMetricFamily(
            "reef_trainer_lease_takeovers",
            "Tenures of each trainer's lease after the first (a new holder, or one that lost it"
            " and took it again)",
            labels=trainer_labels,
        )
        publications = CounterMetricFamily(
            "reef_publications", "Artifacts this process put into its engine", labels=["scenario"]
        )
        failures = CounterMetricFamily(
            "reef_publication_failures",
            "Publications of this process that its engine refused",
            labels=["scenario"],
        )
        last = GaugeMetricFamily(
            "reef_publication_last_duration_seconds",
            "Seconds this process's last publication took",
            labels=["scenario"],
        )
        for scenario in service.scenarios.values():
            status = scenario_status(
                scenario.name,
                records=scenario.records,
                samples=scenario.samples,
                settings=scenario.settings,
                trainers=scenario.admission.trainers,
            )
            leases = TrainerLeases(scenario.samples.database, scenario.name)
            for reason, count in status.drops.items():
                dropped.add_metric([process, scenario.name, "", reason], count)
            for trainer in status.trainers:
                labels = [process, scenario.name, trainer.trainer]
                pipeline = trainer.pipeline
                figures = {
                    "ready": trainer.ready_samples,
                    "buffer": trainer.buffer_size,
                    "stale": pipeline.get("stale_samples"),
                    "held": pipeline.get("held_with_stale_group"),
                    "pending": trainer.pending_instructions,
                    "manual": trainer.manual_buffer,
                }
                for key, value in figures.items():
                    if isinstance(value, int):
                        gauges[key].add_metric(labels, value)
                for reason, count in trainer.drops.items():
                    dropped.add_metric([*labels, reason], count)
                if trainer.served_artifact is not None:
                    served.add_metric(labels, {"artifact": trainer.served_artifact})
                lease = leases.current(trainer.trainer)
                if lease is not None:
                    holder.add_metric(labels, {"holder": lease.holder})
                    takeovers.add_metric(labels, max(0, lease.token - 1))
            publisher = service.runtime.publisher(scenario.name)
            if publisher is not None:
                published = publisher.status()
                publications.add_metric([scenario.name], published["publications"])
                failures.add_metric([scenario.name], published["failures"])
                latest = published.get("last_publication")
                if isinstance(latest, dict):
                    last.add_metric([scenario.name], latest["seconds"])
        yield from gauges.values()
        yield from (dropped, served, holder, takeovers, publications, failures, last)


#: The name of every metric the service exports, as a scrape names its samples' families
#: (a counter ``reef_jobs`` is scraped as ``reef_jobs_total``), for the dashboard's check.
METRIC_NAMES: Final = frozenset(
    {
        "reef_requests_total",
        "reef_request_duration_seconds",
        "reef_engine_duration_seconds",
        "reef_overhead_seconds",
        "reef_stream_cuts_total",
        "reef_refusals_total",
        "reef_connections_dropped_total",
        "reef_store_write_duration_seconds",
        "reef_store_write_failures_total",
        "reef_jobs_total",
        "reef_job_duration_seconds",
        "reef_trained_tokens_total",
        "reef_trainer_ready_samples",
        "reef_trainer_buffer_samples",
        "reef_trainer_stale_samples",
        "reef_trainer_held_with_stale_samples",
        "reef_trainer_pending_instructions",
        "reef_trainer_manual_buffer_samples",
        "reef_dropped_samples_total",
        "reef_served_artifact_info",
        "reef_trainer_lease_info",
        "reef_trainer_lease_takeovers_total",
        "reef_publications_total",
        "reef_publication_failures_total",
        "reef_publication_last_duration_seconds",
        "reef_publication_duration_seconds",
    }
)


class RequestMetrics:
    """ASGI middleware around the whole application: each request counted and timed to its
    answer's last byte (:meth:`ServiceMetrics.request_done`)."""

    def __init__(self, app: ASGIApp, *, metrics: ServiceMetrics) -> None:
        self.app = app
        self._metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        call = _Call()
        token = _CALL.set(call)
        started = time.perf_counter()
        status = 500  # what the client gets when the application raises

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            _CALL.reset(token)
            named = scope.get("path_params", {}).get("scenario")
            if named is None:
                named = _header(scope, b"x-reef-scenario")
            self._metrics.request_done(
                scope, call, status, time.perf_counter() - started, named or ""
            )


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return bytes(value).decode("latin-1")
    return None


class TimedEngine:
    """A scenario's engine, with the seconds each call waits for it added to the request's
    measures (a stream's: until its answer starts, then each event)."""

    def __init__(self, engine: ChatEngine) -> None:
        self._engine = engine
        self.returns_tokens = engine.returns_tokens
        self.native_formats = engine.native_formats

    async def complete(self, request: JSON, *, api_format: str = CHAT_COMPLETIONS) -> EngineAnswer:
        started = time.perf_counter()
        try:
            return await self._engine.complete(request, api_format=api_format)
        finally:
            _add_engine_time(time.perf_counter() - started)

    async def stream(self, request: JSON, *, api_format: str = CHAT_COMPLETIONS) -> EngineStream:
        started = time.perf_counter()
        try:
            answer = await self._engine.stream(request, api_format=api_format)
        finally:
            _add_engine_time(time.perf_counter() - started)
        return attrs.evolve(answer, events=_timed(answer.events))

    async def aclose(self) -> None:
        await self._engine.aclose()


async def _timed(events: AsyncIterator[str]) -> AsyncIterator[str]:
    try:
        while True:
            started = time.perf_counter()
            try:
                event = await anext(events)
            except StopAsyncIteration:
                return
            finally:
                _add_engine_time(time.perf_counter() - started)
            yield event
    finally:
        closing = getattr(events, "aclose", None)
        if closing is not None:  # the engine's stream ends with this one (its connection)
            await closing()


def _add_engine_time(seconds: float) -> None:
    call = _CALL.get()
    if call is not None:
        call.engine_seconds += seconds
        call.engine_called = True


async def get_metrics(request: Request) -> Response:
    """``GET /metrics``: the service's metrics in Prometheus' text format, for a token with the
    ``metrics`` scope (any loopback client of a service without tokens).

    :raises ApiError: 403 for a token limited to scenarios (the figures name every scenario);
        501 without the ``metrics`` extra."""
    service = service_of(request)
    caller = service.caller(request)
    caller.require("metrics")
    if caller.scenarios is not None:
        raise ApiError.one(
            403,
            "forbidden",
            "authorization",
            f"token {caller.name!r} is limited to scenarios, and the metrics name every"
            " scenario: give the scraper a token that is not limited",
        )
    if service.metrics is None:
        raise ApiError.one(
            501,
            "not_installed",
            "metrics",
            "the service's metrics need prometheus-client: pip install 'reef-core[metrics]'",
        )
    import anyio.to_thread
    from prometheus_client import CONTENT_TYPE_LATEST

    text = await anyio.to_thread.run_sync(service.metrics.text)
    return Response(text, media_type=CONTENT_TYPE_LATEST)


#: The metrics route.
ROUTES: Final = (
    ApiRoute(
        "GET",
        "/metrics",
        "the service's metrics in Prometheus' text format",
        get_metrics,
        None,
        {200: None},
        "metrics",
    ),
)
