"""How the service treats connections: read timeouts, a cap on open connections, open files.

uvicorn alone waits for a client's request headers and body as long as the client likes and
accepts every connection it is offered, so a few hundred idle or crawling clients can hold every
file descriptor of the process and shut legitimate callers out. ``reef serve`` runs uvicorn
with :class:`GuardedProtocol`, which adds, per connection:

- a **header timeout**: a connection that has not sent a complete request head within
  ``header_timeout`` seconds of opening (or of its previous answer) gets ``408`` and is closed;
- a **body timeout**: a request whose body has not fully arrived ``body_timeout`` seconds after
  its head is broken off (the connection is closed);
- a **connection cap**: at most ``max_connections`` connections are open at once. A new one
  beyond the cap closes the connection that has waited longest for its request head (an idle
  one); when every open connection is working on a request, the new one is closed instead.

The limits are the deployment's ``service`` section (:class:`~reef.core.deployment.ServiceSection`,
defaults in ``docs/configuration.md``). Each connection a limit ends is counted by reason in the
application's metrics, where it has them (``reef_connections_dropped_total``: ``header_timeout``,
``body_timeout``, ``evicted`` for an idle one closed to make room, ``busy`` for a new one closed
at the cap): these never reach the application, so its request counts cannot see them. At
start :func:`raise_open_file_limit` raises the process's soft limit of open files to its hard
limit where the system allows, so the cap, not the file table, is what bounds the connections.
"""

from __future__ import annotations

import asyncio
import collections
import json
import logging
import resource
from collections.abc import Callable
from typing import Any, Final

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from reef.core.deployment import ServiceSection

__all__ = ["GuardedConfig", "GuardedProtocol", "raise_open_file_limit"]

_log = logging.getLogger(__name__)

#: Open files the process keeps beyond its connections (the databases, logs, models).
SPARE_FILES: Final = 256

_REASON: Final = "the request head did not arrive in time; send it at once"
_TIMEOUT_BODY: Final = json.dumps(
    {"error": "timeout", "message": _REASON, "problems": [{"field": "$", "reason": _REASON}]}
).encode()
_TIMEOUT_ANSWER: Final = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"
    + f"content-length: {len(_TIMEOUT_BODY)}\r\n\r\n".encode()
    + _TIMEOUT_BODY
)


class ConnectionGuard:
    """The open connections of one server and its limits (see the module docstring).

    :param dropped: told the reason of each connection a limit ends (the metrics').
    """

    def __init__(
        self, limits: ServiceSection, dropped: Callable[[str], None] | None = None
    ) -> None:
        self.limits = limits
        self.dropped = dropped or (lambda reason: None)
        self.open: set[GuardedProtocol] = set()
        #: The connections waiting for a request head, the longest-waiting first.
        self.waiting: collections.OrderedDict[GuardedProtocol, None] = collections.OrderedDict()

    def admit(self, connection: GuardedProtocol) -> bool:
        """Count ``connection`` in, closing the longest-idle one when at the cap; ``False``
        when it must be closed itself (every open connection is busy)."""
        if len(self.open) >= self.limits.max_connections:
            if not self.waiting:
                _log.warning("%d connections are busy: a new one is refused", len(self.open))
                self.dropped("busy")
                return False
            idle, _ = self.waiting.popitem(last=False)
            _log.warning("at %d connections: the longest-idle one is closed", len(self.open))
            idle.expire("evicted")
        self.open.add(connection)
        return True

    def release(self, connection: GuardedProtocol) -> None:
        self.open.discard(connection)
        self.waiting.pop(connection, None)


class GuardedProtocol(HttpToolsProtocol):
    """uvicorn's HTTP protocol with the module's timeouts and cap; made by uvicorn from a
    :class:`GuardedConfig`."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        assert isinstance(config, GuardedConfig)
        self.guard = config.guard
        self._timer: asyncio.TimerHandle | None = None

    # -- phases ---------------------------------------------------------------------------------

    def _wait(self, seconds: float, then: Any) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_later(seconds, then)

    def _stop_waiting(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.guard.waiting.pop(self, None)

    def _await_head(self) -> None:
        self.guard.waiting[self] = None
        self._wait(self.guard.limits.header_timeout, self.expire)

    def expire(self, reason: str = "header_timeout") -> None:
        """The head did not come in time, or room is needed (``evicted``): answer 408 and
        close."""
        self._stop_waiting()
        if not self.transport.is_closing():
            self.guard.dropped(reason)
            self.transport.write(_TIMEOUT_ANSWER)
            self.transport.close()

    def _body_late(self) -> None:
        self._timer = None
        if not self.transport.is_closing():
            _log.info("a request body did not arrive in time: the connection is closed")
            self.guard.dropped("body_timeout")
            self.transport.close()

    # -- uvicorn's protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self.guard.admit(self):
            transport.close()
            return
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        self.guard.release(self)
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._stop_waiting()
        super().on_headers_complete()
        self._wait(self.guard.limits.body_timeout, self._body_late)

    def on_message_complete(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self.pipeline:
            self._await_head()


class GuardedConfig(uvicorn.Config):
    """A uvicorn configuration whose connections follow ``limits`` (the module docstring);
    the metrics of ``app`` (an application of :func:`reef.server.create_app`), where it has
    them, count the connections the limits end."""

    def __init__(self, app: Any, *, limits: ServiceSection, **kwargs: Any) -> None:
        super().__init__(app, http=GuardedProtocol, **kwargs)
        self.limits = limits
        self.guard_connections_of(app)

    def guard_connections_of(self, app: Any) -> None:
        """Guard the connections with a new :class:`ConnectionGuard` of the limits, counting
        into the metrics of ``app`` where it has them."""
        service = getattr(getattr(app, "state", None), "service", None)
        metrics = getattr(service, "metrics", None)
        self.guard = ConnectionGuard(
            self.limits, None if metrics is None else metrics.connection_dropped
        )


def raise_open_file_limit(limits: ServiceSection) -> int:
    """Raise the soft limit of open files to the hard limit where allowed; the soft limit
    after. Warns when it stays below the connection cap and :data:`SPARE_FILES`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError) as exc:
            _log.warning("cannot raise the open-file limit from %d to %d: %s", soft, hard, exc)
    needed = limits.max_connections + SPARE_FILES
    if soft != resource.RLIM_INFINITY and soft < needed:
        _log.warning(
            "the open-file limit (%d) is below service.max_connections + %d (%d): lower"
            " max_connections or raise the limit (ulimit -n)",
            soft,
            SPARE_FILES,
            needed,
        )
    return soft
