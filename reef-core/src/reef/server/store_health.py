"""Whether a store can write, as the service last learned it, and the answer when it cannot.

When a write fails for a reason of the database itself (a full disk, a file-size limit, a
PostgreSQL server gone: SQLAlchemy's ``OperationalError``), the request is answered ``503``
with the JSON error ``store_unavailable`` and its reason, and the store is marked unavailable.
No other error marks it: a name or a file the request got wrong is the request's own.

From then on a chat call is refused *before* its engine is called (an answer that cannot be
recorded would be lost for training), until the write that failed would succeed: the first
request after :data:`PROBE_INTERVAL` seconds probes with a write as large as the largest that
failed (the record, the item, the body), committed and removed again
(:meth:`~reef.storage.Database.probe_write`). A write that changes nothing, or a small one,
fits in pages the database already has and succeeds on a full disk where the record does not,
so a small probe would let calls through to the engine whose answers cannot be kept. The
service recovers by itself, without a restart, once the store can take that write.
"""

from __future__ import annotations

import time
from typing import Final

import anyio.to_thread
from sqlalchemy.exc import OperationalError

from reef.server.errors import ApiError
from reef.storage import Database

__all__ = ["PROBE_INTERVAL", "StoreHealth", "store_unavailable"]

#: Seconds between two probes of a store marked unavailable.
PROBE_INTERVAL: Final = 1.0


def store_unavailable(reason: str) -> ApiError:
    """The 503 answer of a request the store cannot take now."""
    return ApiError.one(
        503, "store_unavailable", "store", f"the store cannot write now ({reason}); retry later"
    )


def failure_reason(exc: BaseException) -> str:
    """What the database said, in one line (SQLAlchemy's wrapper says more than the user
    needs: the statement and a link)."""
    original = exc.orig if isinstance(exc, OperationalError) else exc
    return str(original).splitlines()[0] if str(original) else type(original).__name__


class StoreHealth:
    """Whether one database can write; see the module docstring."""

    def __init__(self, database: Database) -> None:
        self.database = database
        #: Why the store cannot write, or ``None`` while it can (as far as anybody knows).
        self.reason: str | None = None
        #: The size of the largest write that failed since the store last could write.
        self.failed_bytes = 0
        self._probed_at = 0.0

    def failed(self, exc: BaseException, size: int = 0) -> None:
        """A write of ``size`` bytes to this store failed for a reason of the database."""
        self.reason = failure_reason(exc)
        self.failed_bytes = max(self.failed_bytes, size)

    async def require_writable(self) -> None:
        """Return when the store can write, as far as the service knows (probing again when
        it was marked unavailable and the last probe is old enough).

        :raises ApiError: 503 ``store_unavailable`` with the reason.
        """
        if self.reason is None:
            return
        now = time.monotonic()
        if now - self._probed_at >= PROBE_INTERVAL:
            self._probed_at = now
            try:
                await anyio.to_thread.run_sync(self.database.probe_write, self.failed_bytes)
            except OperationalError as exc:
                self.failed(exc)
            else:
                self.reason, self.failed_bytes = None, 0
                return
        raise store_unavailable(self.reason)
