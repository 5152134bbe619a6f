"""Reef as a service: the inference service and the HTTP API, one ASGI application.

``create_app(deployment, databases=open_databases(deployment), plugins=plugins)`` makes the
application; ``reef serve`` runs it with uvicorn. Routes are storage-authoritative: admission
checks a request, writes it durably and answers, and the trainers read the stores. See
``docs/service.md`` for the routes, auth, the status snapshot a trainer writes, and the
decisions taken here. Needs the ``server`` extra of reef-core (Starlette, uvicorn, httpx).
"""

from reef.server.app import create_app, open_databases
from reef.server.auth import UnauthenticatedServiceError, check_bind_address
from reef.server.errors import ApiError, ReportRejected, ServiceConfigError, UploadRejected
from reef.server.inference import RECORD_ID_HEADER, SCENARIO_HEADER
from reef.server.service import LOCAL_ENGINE, ServerOptions
from reef.server.service_runtime import ServiceRuntime

__all__ = [
    "LOCAL_ENGINE",
    "RECORD_ID_HEADER",
    "SCENARIO_HEADER",
    "ApiError",
    "ReportRejected",
    "ServerOptions",
    "ServiceConfigError",
    "ServiceRuntime",
    "UnauthenticatedServiceError",
    "UploadRejected",
    "check_bind_address",
    "create_app",
    "open_databases",
]
