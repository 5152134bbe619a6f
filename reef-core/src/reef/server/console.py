"""``/reef/console``: the web page that shows a person the scenarios, their samples and jobs,
and lets them choose what trains.

The page is static: HTML, CSS and hand-written JavaScript modules shipped inside the package
(``reef/server/console/``), read once when the application is made, served as they are (no
build step, nothing fetched from elsewhere). It holds no data, so it is served without a
token; every piece of data it shows comes from the API's own routes, which it calls with the
bearer token the person types in (kept in the tab's ``sessionStorage``), under the same scopes
as any client. A service without auth serves the page, like everything else, to loopback
clients only. See ``docs/console.md``.
"""

from __future__ import annotations

from importlib import resources
from typing import Final

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route

from reef.server.errors import ApiError
from reef.server.service import service_of

__all__ = ["CONSOLE_PATH", "console_mount"]

#: Where the console is served.
CONSOLE_PATH: Final = "/reef/console"

_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}

#: The page may load only its own files and call only its own service; it may not be framed.
_HEADERS: Final = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
        " connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-cache",
}


def console_files() -> dict[str, tuple[bytes, str]]:
    """The console's files by name, with their content types, read from the package."""
    folder = resources.files("reef.server") / "console"
    found = {}
    for entry in folder.iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in _TYPES:
            found[entry.name] = (entry.read_bytes(), _TYPES[suffix])
    if "index.html" not in found:
        raise RuntimeError(f"the console's files are missing from {folder}")
    return found


def console_mount() -> Mount:
    """The console's routes, mounted at :data:`CONSOLE_PATH` (not part of the API document:
    they serve the page, never data)."""
    files = console_files()

    async def serve(request: Request) -> Response:
        service_of(request).auth.check_client(request.client.host if request.client else None)
        name = request.path_params.get("name") or "index.html"
        if name not in files:
            raise ApiError.one(404, "not_found", "path", f"the console has no file {name!r}")
        content, media_type = files[name]
        return Response(content, media_type=media_type, headers=_HEADERS)

    # ``/reef/console`` itself is redirected to ``/reef/console/`` by the router, so the page
    # names its files relative to that folder.
    return Mount(
        CONSOLE_PATH,
        routes=[Route("/", serve, methods=["GET"]), Route("/{name}", serve, methods=["GET"])],
    )
