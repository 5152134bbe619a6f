"""The ASGI application: ``create_app(deployment, databases=..., plugins=...)``.

One Starlette application serves the inference service and the HTTP API. Its routes are
storage-authoritative: admission checks a request completely, writes it durably in one
transaction and answers; the trainers read the stores. No route calls a trainer (a mode change,
an instruction, a manual-buffer edit is stored, then an optional runtime hook hears of it).

Every refused request gets a 4xx whose JSON body (:class:`~reef.server.errors.ErrorBody`) names
the field and the reason, and nothing of it is stored. See ``docs/service.md``.

Every route takes the same checks before its handler, none of them the handler's own: the
requests of other sites are refused (:class:`~reef.server.cross_site.CrossSiteGuard`, around
the whole application), and each route's path parameters are names and its JSON body is
declared JSON (:meth:`~reef.server.openapi.ApiRoute.endpoint`). Only an error of the database
itself (SQLAlchemy's ``OperationalError``) marks the stores unable to write; any other error
is the request's own.

This module puts the application together: the route table (each resource's module owns its
handlers and route rows: :mod:`~reef.server.inference`, :mod:`~reef.server.reports`,
:mod:`~reef.server.items`, :mod:`~reef.server.scenarios`, :mod:`~reef.server.samples`,
:mod:`~reef.server.jobs`, :mod:`~reef.server.status`), the OpenAPI document made from it, the
console's page (:mod:`~reef.server.console`), the error answers and the lifespan that starts
and stops the :class:`~reef.server.service.Service` behind the routes; and, where their
libraries are installed, the application's own metrics (:mod:`~reef.server.metrics`) and
spans (:mod:`~reef.server.tracing`) around it all.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Final

from sqlalchemy.exc import OperationalError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from reef.core.deployment import Deployment
from reef.plugins import Plugins
from reef.server import (
    evaluations,
    export,
    formats,
    generator,
    inference,
    items,
    jobs,
    metrics,
    reports,
    samples,
    scenarios,
    status,
)
from reef.server.bodies import error_answer
from reef.server.console import console_mount
from reef.server.cross_site import CrossSiteGuard
from reef.server.errors import ApiError
from reef.server.metrics import RequestMetrics, ServiceMetrics, TimedEngine, metrics_available
from reef.server.openapi import ApiRoute, openapi_document
from reef.server.request_json import request_bytes
from reef.server.service import ServerOptions, Service
from reef.server.service_runtime import ServiceRuntime
from reef.server.store_health import failure_reason, store_unavailable
from reef.server.tracing import JobTelemetry, RequestSpans, tracer_of
from reef.storage import Database, open_database

__all__ = ["API_ROUTES", "create_app", "open_databases"]


async def get_openapi(request: Request) -> Response:
    """``GET /openapi.json``: the document of :data:`API_ROUTES`."""
    return JSONResponse(request.app.state.openapi)


#: Every route of the service, in the order the OpenAPI document lists them.
API_ROUTES: Final[tuple[ApiRoute, ...]] = (
    ApiRoute("GET", "/openapi.json", "this document", get_openapi, responses={200: None}),
    *inference.ROUTES,
    *formats.ROUTES,
    *reports.ROUTES,
    *items.ROUTES,
    *scenarios.ROUTES,
    *samples.ROUTES,
    *export.ROUTES,
    *evaluations.ROUTES,
    *jobs.ROUTES,
    *status.ROUTES,
    *generator.ROUTES,
    *metrics.ROUTES,
)


def _refusal(request: Request, error: ApiError) -> Response:
    """The answer to a refused request, counted by the metrics where the service has them."""
    counted = request.app.state.service.metrics
    if counted is not None:
        counted.refused(request, error)
    return error_answer(error)


async def _api_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiError)
    return _refusal(request, exc)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    field = "method" if exc.status_code == 405 else "path"
    return _refusal(
        request,
        ApiError.one(exc.status_code, "not_found" if exc.status_code == 404 else "invalid_request",
                     field, f"{exc.detail}: {request.method} {request.url.path}")
    )  # fmt: skip


async def _store_error(request: Request, exc: Exception) -> Response:
    """A write the database could not take: 503 with its reason, and the stores are probed
    before the next chat call reaches an engine (:mod:`reef.server.store_health`)."""
    request.app.state.service.store_failed(exc, request_bytes(request))
    return _refusal(request, store_unavailable(failure_reason(exc)))


async def _internal_error(request: Request, exc: Exception) -> Response:
    """Anything else the request met: a JSON 500 naming the kind of error, never its detail
    (it may name files of the machine); the traceback goes to the log. The stores are not
    marked: only the database's own error says they cannot write."""
    return error_answer(
        ApiError.one(
            500,
            "internal_error",
            "$",
            f"the service failed on this request ({type(exc).__name__}); its log says why",
        )
    )


def create_app(
    deployment: Deployment,
    *,
    databases: Mapping[str, Database],
    plugins: Plugins,
    runtime: ServiceRuntime | None = None,
    options: ServerOptions | None = None,
    environ: Mapping[str, str] | None = None,
) -> Starlette:
    """The service of ``deployment`` as an ASGI application.

    Builds each scenario's stages now (so a bad config fails here, not at the first request);
    the ledgers and engine clients start with the application's lifespan and stop with it.

    :param databases: the opened databases by storage URL: the deployment's own and every
        scenario's (:func:`open_databases`).
    :param plugins: the loaded plugins, which resolve the stage classes.
    :param runtime: the hooks of the process that runs the trainers (the local engine, the
        served artifact, notifications); none by default.
    :param options: how the service runs (auth, limits).
    :raises reef.server.auth.UnauthenticatedServiceError: for a deployment without tokens that
        was not explicitly allowed to run without them.
    """
    service = Service(
        deployment,
        databases=databases,
        plugins=plugins,
        runtime=runtime or ServiceRuntime(),
        options=options or ServerOptions(),
        environ=environ,
    )

    service.metrics = ServiceMetrics(service) if metrics_available() else None
    if service.metrics is not None:
        for scenario in service.scenarios.values():
            if scenario.engine is not None:
                scenario.engine = TimedEngine(scenario.engine)
            publisher = service.runtime.publisher(scenario.name)
            if publisher is not None:
                publisher.on_published = functools.partial(service.metrics.published, scenario.name)
    tracer = tracer_of(service.options.tracer_provider)
    service.runtime.observe_trainers(JobTelemetry(service.metrics, tracer))
    # The first is the outermost: the metrics see every request, the refused ones included.
    middleware = [
        Middleware(
            CrossSiteGuard,
            authenticated=service.auth.enabled,
            allowed_hosts=deployment.service.allowed_hosts,
            allowed_origins=deployment.service.allowed_origins,
        )
    ]
    if tracer is not None:
        middleware.insert(0, Middleware(RequestSpans, tracer=tracer))
    if service.metrics is not None:
        middleware.insert(0, Middleware(RequestMetrics, metrics=service.metrics))

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        service.start()
        try:
            yield
        finally:
            await service.stop()

    app = Starlette(
        routes=[
            *(Route(r.path, r.endpoint(), methods=[r.method]) for r in API_ROUTES),
            console_mount(),
        ],
        exception_handlers={
            ApiError: _api_error,
            HTTPException: _http_error,
            OperationalError: _store_error,
            Exception: _internal_error,
        },
        middleware=middleware,
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.openapi = openapi_document(API_ROUTES)
    return app


def open_databases(deployment: Deployment) -> dict[str, Database]:
    """Open (and migrate) every database the deployment names, once per URL."""
    urls: Sequence[str] = [deployment.storage.url] + [
        deployment.storage_of(name).url for name in deployment.scenarios
    ]
    return {url: open_database(url) for url in dict.fromkeys(urls)}
