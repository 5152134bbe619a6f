"""Slow and idle clients against the service as ``reef serve`` runs it (uvicorn with
:mod:`reef.server.connections`, on loopback): hundreds of connections that send nothing, or a
body that never finishes, do not keep authenticated calls from being answered; a head that does
not arrive in time gets 408, a body that does not arrive is broken off, and beyond the cap the
longest-idle connection makes room."""

from __future__ import annotations

import contextlib
import resource
import socket
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

import httpx

from reef.core.deployment import ServiceSection
from reef.plugins.scenarios import load_deployment
from reef.server import create_app
from reef.server.connections import raise_open_file_limit
from reef.storage import Database
from reef.testing.engines import scripted_engine
from reef.testing.service import serve_on_loopback, service_test_plugins

TOKEN = "agent-secret-for-tests"
HEADERS = {"authorization": f"Bearer {TOKEN}"}
DEPLOYMENT = f"""
storage: {{url: "%(url)s"}}
serving: {{engine: "%(engine)s/v1"}}
auth: {{tokens: {{agent: {{token: {TOKEN}, scopes: [infer, feedback, admin, metrics]}}}}}}
scenarios:
  support:
    recipe: servicetest
    training: {{component: noop}}
"""
#: How long a test waits for the server to do what it should (never a measured bound).
PATIENCE = 30.0


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    with serve_on_loopback(scripted_engine()) as url:
        yield url


@contextlib.contextmanager
def service(
    storage_url: str, database: Database, engine_url: str, limits: ServiceSection
) -> Iterator[str]:
    plugins = service_test_plugins()
    deployment = load_deployment(
        DEPLOYMENT % {"url": storage_url, "engine": engine_url}, plugins=plugins
    )
    app = create_app(deployment, databases={storage_url: database}, plugins=plugins)
    with serve_on_loopback(app, limits=limits) as url:
        yield url


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def open_idle(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]


def open_slow_bodies(port: int, count: int) -> list[socket.socket]:
    """Connections that sent a complete head announcing 1000 bytes, and 10 of them."""
    opened = []
    for _ in range(count):
        conn = socket.create_connection(("127.0.0.1", port))
        conn.sendall(
            b"POST /reef/scenarios/support/reports HTTP/1.1\r\nhost: x\r\n"
            + f"authorization: Bearer {TOKEN}\r\n".encode()
            + b'content-type: application/json\r\ncontent-length: 1000\r\n\r\n{"id": "r",'
        )
        opened.append(conn)
    return opened


def answered(url: str, count: int) -> list[int]:
    statuses = []
    with httpx.Client(base_url=url, headers=HEADERS, timeout=PATIENCE) as client:
        for n in range(count):
            chat = client.post(
                "/scenarios/support/v1/chat/completions",
                json={"messages": [{"role": "user", "content": f"question {n}"}]},
            )
            statuses.append(chat.status_code)
            statuses.append(client.get("/reef/status").status_code)
    return statuses


def read_until_closed(conn: socket.socket) -> bytes:
    conn.settimeout(PATIENCE)
    received = b""
    while chunk := conn.recv(4096):
        received += chunk
    return received


def dropped(url: str) -> dict[str, float]:
    """``reef_connections_dropped_total`` of the service at ``url``, by reason."""
    pytest.importorskip("prometheus_client", reason="the service's metrics (its metrics extra)")
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{url}/metrics", headers=HEADERS, timeout=PATIENCE).text
    return {
        sample.labels["reason"]: sample.value
        for family in text_string_to_metric_families(text)
        if family.name == "reef_connections_dropped"
        for sample in family.samples
        if sample.name == "reef_connections_dropped_total"
    }


def close_all(connections: list[socket.socket]) -> None:
    for conn in connections:
        conn.close()


def test_idle_and_slow_connections_do_not_shut_out_authenticated_calls(
    storage_url: str, storage_database: Database, engine_url: str
) -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200 and raise_open_file_limit(ServiceSection()) < 1200:
        pytest.skip("this test holds 1,100 sockets (both ends in one process); ulimit -n is lower")
    limits = ServiceSection(header_timeout=600, body_timeout=600, max_connections=1000)
    with service(storage_url, storage_database, engine_url, limits) as url:
        port = port_of(url)
        idle = open_idle(port, 300)
        slow = open_slow_bodies(port, 150)
        held = idle + slow
        try:
            assert set(answered(url, 10)) == {200}
            # Beyond the cap: every new idle connection closes the longest-idle one, and a
            # working client is still answered.
            crowd = open_idle(port, 600)
            held += crowd
            assert set(answered(url, 5)) == {200}
            first = read_until_closed(idle[0])
            assert first.startswith(b"HTTP/1.1 408"), first
            assert dropped(url).get("evicted", 0) >= 1
        finally:
            close_all(held)


def test_a_head_that_does_not_arrive_in_time_gets_408(
    storage_url: str, storage_database: Database, engine_url: str
) -> None:
    limits = ServiceSection(header_timeout=0.5, body_timeout=600, max_connections=100)
    with service(storage_url, storage_database, engine_url, limits) as url:
        (silent,) = open_idle(port_of(url), 1)
        (partial,) = open_idle(port_of(url), 1)
        partial.sendall(b"GET /reef/status HTTP/1.1\r\nhost: x\r\n")  # never finished
        try:
            for conn in (silent, partial):
                answer = read_until_closed(conn)
                assert answer.startswith(b"HTTP/1.1 408 Request Timeout"), answer
                assert b'"error": "timeout"' in answer
            assert set(answered(url, 1)) == {200}
            assert dropped(url) == {"header_timeout": 2.0}  # counted, though never a request
        finally:
            close_all([silent, partial])


def test_a_body_that_does_not_arrive_in_time_is_broken_off(
    storage_url: str, storage_database: Database, engine_url: str
) -> None:
    limits = ServiceSection(header_timeout=600, body_timeout=0.5, max_connections=100)
    with service(storage_url, storage_database, engine_url, limits) as url:
        (slow,) = open_slow_bodies(port_of(url), 1)
        try:
            assert read_until_closed(slow) == b""
            # A body that arrives at once is not affected by the limit.
            assert set(answered(url, 2)) == {200}
            assert dropped(url) == {"body_timeout": 1.0}
        finally:
            slow.close()


def test_the_limits_are_read_from_the_deployment(
    storage_url: str, storage_database: Database, engine_url: str
) -> None:
    text = (DEPLOYMENT % {"url": storage_url, "engine": engine_url}) + (
        "service: {header_timeout: 2.5, max_connections: 12}\n"
    )
    deployment = load_deployment(text, plugins=service_test_plugins())
    assert deployment.service == ServiceSection(
        header_timeout=2.5, body_timeout=30.0, max_connections=12
    )
    defaults: Any = load_deployment(
        DEPLOYMENT % {"url": storage_url, "engine": engine_url}, plugins=service_test_plugins()
    ).service
    assert (defaults.header_timeout, defaults.body_timeout, defaults.max_connections) == (
        10.0,
        30.0,
        1000,
    )
