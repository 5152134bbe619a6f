"""What a browser may not make the service do: the checks against requests of other sites.

A service without tokens (the quickstart's mode) trusts whoever reaches it on loopback, and a
browser on the same machine reaches loopback for any page it shows. Without these checks a
page of another site could change the training mode, queue an instruction or plant a data item
with a form or a ``fetch`` that needs no permission, and a host name rebound to 127.0.0.1 (DNS
rebinding) could read every answer back. :class:`CrossSiteGuard` wraps the whole application,
so every route has the checks, the ones added later and the console's page included:

- **Host**: a loopback name (``localhost``, ``*.localhost``, ``127.0.0.0/8``, ``[::1]``) or
  one in ``service.allowed_hosts``; with tokens and no list, any. A rebound name is refused
  before anything is read or done (403, field ``host``). A loopback name is always the
  service's own: a page cannot make a browser send one for its own origin, and the process's
  own clients (the task generators reaching the generator service) call it so.
- **Origin**, on every request that may change state (any method but ``GET``, ``HEAD`` and
  ``OPTIONS``): a browser names the page's origin; one that is not the service's own (the
  ``Origin``'s host and port against the request's ``Host``) nor in
  ``service.allowed_origins`` is refused (403, field ``origin``). A request without an
  ``Origin`` comes from no browser page and goes on.

The third check is the route table's (:meth:`reef.server.openapi.ApiRoute.endpoint`): a route
that reads JSON refuses a body of another content type (415), the kind a page may send
anywhere without asking first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from reef.server.auth import is_loopback
from reef.server.bodies import error_answer
from reef.server.errors import ApiError

__all__ = ["CrossSiteGuard", "is_loopback_host"]

#: Methods that read only: a foreign origin may send them, and can read no answer back (the
#: service sends no CORS header).
_SAFE_METHODS: Final = frozenset(("GET", "HEAD", "OPTIONS"))


def _split_host(value: str) -> tuple[str, str | None]:
    """A Host header value (or an allowed name) as its lower-cased host and port."""
    value = value.strip().lower()
    if value.startswith("["):
        host, _, rest = value.partition("]")
        port = rest[1:] if rest.startswith(":") else None
        return host + "]", port or None
    host, colon, port = value.rpartition(":")
    if not colon or not port.isdigit():
        return value, None
    return host, port


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (a Host header value's host part) names loopback: ``localhost``, a name
    under ``.localhost`` (browsers resolve it to loopback themselves), ``127.0.0.0/8``, ``::1``."""
    return host.endswith(".localhost") or is_loopback(host)


class CrossSiteGuard:
    """ASGI middleware: the Host and Origin checks of the module docstring.

    :param app: the application it guards.
    :param authenticated: the service has tokens.
    :param allowed_hosts: ``service.allowed_hosts`` (``None``: not given).
    :param allowed_origins: ``service.allowed_origins``.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        authenticated: bool,
        allowed_hosts: Sequence[str] | None,
        allowed_origins: Sequence[str],
    ) -> None:
        self.app = app
        self._loopback_only = not authenticated
        self._hosts = None if allowed_hosts is None else [_split_host(h) for h in allowed_hosts]
        self._origins = frozenset(o.lower().rstrip("/") for o in allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = self.refusal(scope["method"], Headers(scope=scope))
            if problem is not None:
                await error_answer(problem)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, method: str, headers: Headers) -> ApiError | None:
        """Why a request with ``method`` and ``headers`` is refused, or ``None``."""
        host = headers.get("host")
        if not self._host_allowed(host):
            return ApiError.one(403, "forbidden", "host", self._host_reason(host))
        origin = headers.get("origin")
        changes = method.upper() not in _SAFE_METHODS
        if changes and origin is not None and not self._origin_allowed(origin, host):
            return ApiError.one(
                403,
                "forbidden",
                "origin",
                f"a page of {origin!r} may not change this service's state; a page served"
                " elsewhere that should is listed in service.allowed_origins",
            )
        return None

    def _host_allowed(self, host: str | None) -> bool:
        if host is None:
            return not self._loopback_only and self._hosts is None
        name, port = _split_host(host)
        if is_loopback_host(name):
            return True
        if self._hosts is None:
            return not self._loopback_only
        return any(name == h and (p is None or p == port) for h, p in self._hosts)

    def _host_reason(self, host: str | None) -> str:
        named = "no Host header" if host is None else f"the Host {host!r}"
        if self._loopback_only:
            return (
                f"this service runs without auth and answers requests for loopback names only,"
                f" not {named}: call it as localhost or 127.0.0.1, or list the name in"
                " service.allowed_hosts"
            )
        return (
            f"{named} is neither a loopback name nor in service.allowed_hosts"
            f" ({', '.join(self._listed())})"
        )

    def _listed(self) -> list[str]:
        return [h if p is None else f"{h}:{p}" for h, p in self._hosts or ()]

    def _origin_allowed(self, origin: str, host: str | None) -> bool:
        origin = origin.strip().lower().rstrip("/")
        if origin in self._origins:
            return True
        parts: Any = urlsplit(origin)
        if parts.scheme not in ("http", "https") or not parts.netloc or host is None:
            return False  # "null" (a sandboxed frame, a file) is no site's own
        return bool(parts.netloc == host.strip().lower())
