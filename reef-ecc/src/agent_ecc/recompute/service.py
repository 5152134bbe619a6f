"""The re-verification service: executes checks over HTTP and answers raw outputs, never verdicts.

``POST /v1/execute`` takes the JSON form of an execution request (see
:mod:`agent_ecc.recompute.wire`), runs it with the :class:`~agent_ecc.recompute.executor.Executor`
and answers ``200`` with the raw output (log, exit code, timed out, the application record, an
executor error). A request that is too large, malformed, or names a blob the store does not hold
is refused with a 4xx naming the field, before anything runs. At most ``capacity`` executions run
at once; a request that waits longer than ``queue_timeout_s`` for a slot is answered ``503`` with
``Retry-After`` (nothing ran, so a client may retry it). ``GET /v1/health`` reports capacity, the
network isolation in use and counters.

The standard library's ``ThreadingHTTPServer`` is enough here: one thread per connection, each
blocked on a subprocess most of the time, with the capacity semaphore as the real bound. Run it
with ``python -m agent_ecc.recompute.service --store DIR [--port 8770] [--capacity 4]``; with
``--runtime docker`` it runs checks of that runtime in containers (the ``docker`` extra).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
from collections import Counter
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from agent_ecc.execution import RUNTIMES, ExecRequest, RawOutput, stopped_output
from agent_ecc.recompute.bubblewrap import BubblewrapExecutor
from agent_ecc.recompute.client import HTTPBackend
from agent_ecc.recompute.container import ContainerExecutor
from agent_ecc.recompute.executor import Executor
from agent_ecc.recompute.wire import MAX_BODY, RequestRefused, output_to_json, parse_request
from agent_ecc.store import ContentStore

__all__ = ["HTTPBackend", "ReverifyService", "main"]

EXECUTE_PATH = "/v1/execute"
HEALTH_PATH = "/v1/health"


class RequestExecutor(Protocol):
    """What runs a request, the executor protocol: :class:`Executor` and
    :class:`~agent_ecc.recompute.bubblewrap.BubblewrapExecutor` (runtime ``git``),
    :class:`~agent_ecc.recompute.container.ContainerExecutor` (runtime ``docker``), or one's own
    sandbox (``docs/ecc/reverification.md`` says what ``run`` owes its caller)."""

    @property
    def runtime(self) -> str:
        """The runtime of the checks it runs."""
        ...

    @property
    def network(self) -> str:
        """How eval scripts are cut off the network (``"none"`` when they are not)."""
        ...

    def run(self, request: ExecRequest) -> RawOutput:
        """Execute ``request``: its raw output."""
        ...


class ReverifyService:
    """The service, listening on ``host:port`` (port 0: any free port) once :meth:`start` ran.

    :param store: the content store shared with the trainer (snapshots, scripts, patches).
    :param executor: what runs a request; by default an :class:`Executor` on ``store``. The
        service executes only requests of its executor's runtime.
    :param capacity: executions at once.
    :param max_body: the largest request body read, in bytes.
    :param max_timeout_s: the largest ``timeout_s`` a request may ask for.
    :param queue_timeout_s: how long a request waits for a free slot before a ``503``.
    """

    def __init__(
        self,
        store: ContentStore,
        *,
        executor: RequestExecutor | None = None,
        capacity: int = 2,
        host: str = "127.0.0.1",
        port: int = 0,
        max_body: int = MAX_BODY,
        max_timeout_s: float = 3600.0,
        queue_timeout_s: float = 600.0,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        self.store = store
        self.executor: RequestExecutor = executor or Executor(store)
        self.capacity = capacity
        self.max_body = max_body
        self.max_timeout_s = max_timeout_s
        self.queue_timeout_s = queue_timeout_s
        self._slots = threading.BoundedSemaphore(capacity)
        self._lock = threading.Lock()
        self.counters: Counter[str] = Counter()
        self._running = 0
        self._server = ThreadingHTTPServer((host, port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL clients post to."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> ReverifyService:
        """Serve in a background thread; returns self."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="agent-ecc-reverify", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until :meth:`close` (from another thread) or a signal."""
        self._server.serve_forever()

    def close(self) -> None:
        """Stop serving (running executions finish in their threads)."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> ReverifyService:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.close()

    def health(self) -> dict[str, Any]:
        """Capacity, network isolation and counters (received, refused, executed, busy)."""
        with self._lock:
            return {
                "ok": True,
                "capacity": self.capacity,
                "running": self._running,
                "runtime": self.executor.runtime,
                "network": self.executor.network,
                "counters": dict(self.counters),
            }

    def _count(self, name: str) -> None:
        with self._lock:
            self.counters[name] += 1

    def execute(self, request: ExecRequest) -> RawOutput | None:
        """Run ``request`` in a free slot; None when none freed up in time (nothing ran)."""
        if not self._slots.acquire(timeout=self.queue_timeout_s):
            self._count("busy")
            return None
        with self._lock:
            self._running += 1
            self.counters["executed"] += 1
        try:
            return self.executor.run(request)
        except Exception as error:  # the executor itself broke: no verdict can come of it (I2)
            return stopped_output(request.request_id, f"executor failed: {error!r}", infra=False)
        finally:
            with self._lock:
                self._running -= 1
            self._slots.release()


def _handler(service: ReverifyService) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "agent-ecc-reverify"

        def log_message(self, format: str, *args: Any) -> None:
            del format, args  # the counters and the client's stats tell what happened

        def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body, sort_keys=True).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _refuse(self, refusal: RequestRefused, *, close: bool = False) -> None:
            service._count("refused")
            if close:
                self.close_connection = True
            self._send(refusal.status, refusal.body(), {"Connection": "close"} if close else None)

        def do_GET(self) -> None:
            if self.path != HEALTH_PATH:
                self._send(404, {"error": f"no resource {self.path}", "field": "path"})
                return
            self._send(200, service.health())

        def do_POST(self) -> None:
            service._count("received")
            if self.path != EXECUTE_PATH:
                self._refuse(RequestRefused(404, "path", f"no resource {self.path}"), close=True)
                return
            if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
                self._refuse(RequestRefused(411, "Content-Length", "chunked bodies are not read"))
                self.close_connection = True
                return
            length_header = self.headers.get("Content-Length")
            try:
                length = int(length_header) if length_header is not None else -1
            except ValueError:
                length = -2
            if length < 0:
                reason = "required" if length == -1 else f"not an integer: {length_header!r}"
                self._refuse(RequestRefused(411, "Content-Length", reason), close=True)
                return
            if length > service.max_body:
                self._refuse(
                    RequestRefused(413, "$", f"body of {length} bytes > {service.max_body}"),
                    close=True,
                )
                return
            data = self.rfile.read(length)
            if len(data) != length:
                self._refuse(RequestRefused(400, "$", "body shorter than Content-Length"))
                self.close_connection = True
                return
            try:
                request = parse_request(
                    data,
                    service.store,
                    max_timeout_s=service.max_timeout_s,
                    runtime=service.executor.runtime,
                )
            except RequestRefused as refusal:
                self._refuse(refusal)
                return
            output = service.execute(request)
            if output is None:
                retry = str(max(1, int(service.queue_timeout_s)))
                self._send(
                    503, {"error": "no free slot", "field": "capacity"}, {"Retry-After": retry}
                )
                return
            self._send(200, output_to_json(output))

        def do_PUT(self) -> None:
            self._send(405, {"error": "use POST", "field": "method"}, {"Allow": "GET, POST"})

        do_DELETE = do_PATCH = do_PUT

    return Handler


def main(argv: Sequence[str] | None = None) -> int:
    """Serve until interrupted (``--help`` lists the options)."""
    parser = argparse.ArgumentParser(prog="python -m agent_ecc.recompute.service")
    parser.add_argument("--store", required=True, help="the content store folder")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8770)
    parser.add_argument("--capacity", type=int, default=2, help="executions at once")
    parser.add_argument("--no-network-isolation", action="store_true")
    parser.add_argument(
        "--runtime",
        choices=RUNTIMES,
        default="git",
        help="git: snapshots from the store; docker: containers of the checks' images",
    )
    parser.add_argument(
        "--docker-url", help="the Docker daemon (default: DOCKER_HOST or the local socket)"
    )
    parser.add_argument(
        "--bubblewrap",
        action="store_true",
        help="runtime git: every command of a check in bubblewrap namespaces (BubblewrapExecutor)",
    )
    args = parser.parse_args(argv)
    if args.bubblewrap and (args.runtime != "git" or args.no_network_isolation):
        parser.error("--bubblewrap runs runtime git checks, always without network")
    store = ContentStore(args.store)
    executor: RequestExecutor
    if args.runtime == "docker":
        executor = ContainerExecutor(
            store, base_url=args.docker_url, isolate_network=not args.no_network_isolation
        )
    elif args.bubblewrap:
        executor = BubblewrapExecutor(store)
    else:
        executor = Executor(store, isolate_network=not args.no_network_isolation)
    service = ReverifyService(
        store, executor=executor, capacity=args.capacity, host=args.host, port=args.port
    )
    print(
        json.dumps({"url": service.url, "runtime": executor.runtime, "network": executor.network}),
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        service.serve_forever()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
