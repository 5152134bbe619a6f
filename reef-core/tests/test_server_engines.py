"""``HttpEngine`` against engines on loopback that misbehave the ways real servers do.

The service forwards each chat call over kept-alive HTTP/1.1 connections of its own. An engine
closes an idle connection when its keep-alive timeout runs out; the call that next picks that
connection must then go out again on a new one, but only when not one byte of an answer came
back (otherwise the engine may have taken it, and a second generation is not ours to start).
Each test runs a small asyncio server that answers as scripted and counts what it received.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

# The server extra (reef-core[server]); without it reef-core's own tests skip this module.
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from reef.engines import http as http_engine
from reef.engines.http import HttpEngine
from reef.engines.interface import EngineError
from reef.testing.service import free_port

ANSWER = {"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant"}}]}
REQUEST = {"messages": [{"role": "user", "content": "hi"}]}


def _whole(body: bytes, *, status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


LoopFactory = Callable[[], asyncio.AbstractEventLoop] | None


@pytest.fixture(params=["asyncio", "uvloop"])
def loop(request: pytest.FixtureRequest) -> LoopFactory:
    """The event loop the calls run on: asyncio's own, and uvloop's, which uvicorn runs the
    service on when it is installed."""
    if request.param == "asyncio":
        return None
    return pytest.importorskip("uvloop").new_event_loop  # type: ignore[no-any-return]


def run_on(loop: LoopFactory, main: Awaitable[Any]) -> Any:
    with asyncio.Runner(loop_factory=loop) as runner:
        return runner.run(main)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def _no_proxy_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts from an environment without proxy settings, and sets its own."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


class ScriptedServer:
    """Answers each request with ``script(connection_number, request_number_on_it)``: bytes to
    send, then whether to close the connection; ``None`` closes it without answering."""

    def __init__(self, script: Callable[[int, int], tuple[bytes, bool] | None]) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[dict[str, Any]] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        number = self.connections
        self.connections += 1
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                self.requests.append(json.loads(await reader.readexactly(length)))
                step = self.script(number, served)
                served += 1
                if step is None:
                    break
                data, close = step
                writer.write(data)
                await writer.drain()
                if close:
                    break
        except asyncio.IncompleteReadError:
            pass  # the client went away
        finally:
            writer.close()


def run(
    loop: LoopFactory, server: ScriptedServer, calls: Callable[[HttpEngine], Awaitable[Any]]
) -> Any:
    async def main() -> Any:
        listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        port = listening.sockets[0].getsockname()[1]
        engine = HttpEngine(f"http://127.0.0.1:{port}/v1", timeout=10)
        try:
            return await calls(engine)
        finally:
            await engine.aclose()
            listening.close()
            await listening.wait_closed()

    return run_on(loop, main())


def test_a_connection_the_engine_closed_while_idle_is_not_used_again(loop: LoopFactory) -> None:
    """The engine answers, keeps the connection 'alive', then closes it (its idle timeout
    ran out): the next call goes out on a new connection and is answered."""
    body = json.dumps(ANSWER).encode()
    server = ScriptedServer(lambda _c, _n: (_whole(body), True))

    async def calls(engine: HttpEngine) -> list[Any]:
        first = await engine.complete(REQUEST)
        await asyncio.sleep(0.2)  # the close reaches the idle connection
        second = await engine.complete(REQUEST)
        return [first.body, second.body]

    assert run(loop, server, calls) == [ANSWER, ANSWER]
    assert server.connections == 2
    assert len(server.requests) == 2


def test_a_call_that_meets_the_idle_close_is_sent_again_once_on_a_new_connection(
    loop: LoopFactory,
) -> None:
    """The engine takes the second call on a kept-alive connection and closes it without a
    byte back (it timed the connection out as the call arrived): the call is sent again on
    a new connection, and answered."""
    body = json.dumps(ANSWER).encode()
    server = ScriptedServer(lambda c, n: None if (c, n) == (0, 1) else (_whole(body), False))

    async def calls(engine: HttpEngine) -> list[Any]:
        return [(await engine.complete(REQUEST)).body for _ in range(2)]

    assert run(loop, server, calls) == [ANSWER, ANSWER]
    assert server.connections == 2
    assert len(server.requests) == 3  # the second call reached the engine twice


def test_a_new_connection_closed_without_an_answer_fails_and_is_not_repeated(
    loop: LoopFactory,
) -> None:
    server = ScriptedServer(lambda _c, _n: None)

    async def calls(engine: HttpEngine) -> Any:
        return await engine.complete(REQUEST)

    with pytest.raises(EngineError, match="did not answer") as caught:
        run(loop, server, calls)
    assert caught.value.status == 502
    assert len(server.requests) == 1


def test_an_answer_broken_off_halfway_fails_and_is_not_repeated(loop: LoopFactory) -> None:
    """Part of the answer came back: the engine took the call, so it is not sent again even
    on a reused connection."""
    body = json.dumps(ANSWER).encode()
    broken = _whole(body)[:-5]
    server = ScriptedServer(
        lambda c, n: (broken, True) if (c, n) == (0, 1) else (_whole(body), False)
    )

    async def calls(engine: HttpEngine) -> Any:
        await engine.complete(REQUEST)
        return await engine.complete(REQUEST)

    with pytest.raises(EngineError, match="broke off") as caught:
        run(loop, server, calls)
    assert caught.value.status == 502
    assert len(server.requests) == 2


def test_a_chunked_answer_is_read_whole_and_its_bytes_kept(loop: LoopFactory) -> None:
    body = json.dumps(ANSWER, indent=1).encode()
    halves = [body[:10], body[10:]]
    chunked = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    chunked += b"transfer-encoding: chunked\r\n\r\n"
    for half in halves:
        chunked += b"%x\r\n%s\r\n" % (len(half), half)
    chunked += b"0\r\n\r\n"
    server = ScriptedServer(lambda _c, _n: (chunked, False))

    async def calls(engine: HttpEngine) -> list[Any]:
        return [await engine.complete(REQUEST) for _ in range(2)]

    first, second = run(loop, server, calls)
    assert first.body == second.body == ANSWER
    assert first.content == body
    assert server.connections == 1  # kept alive after a whole chunked answer


def test_the_engines_4xx_is_the_clients_and_keeps_its_body(loop: LoopFactory) -> None:
    refusal = {"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}
    answer = _whole(json.dumps(refusal).encode(), status="400 Bad Request")
    server = ScriptedServer(lambda _c, _n: (answer, False))

    async def calls(engine: HttpEngine) -> Any:
        return await engine.complete(REQUEST)

    with pytest.raises(EngineError) as caught:
        run(loop, server, calls)
    assert caught.value.status == 400
    assert caught.value.body == refusal


def test_one_engine_serves_one_event_loop_after_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """The service makes its engines with the application, which may be run on a second loop
    after the first stopped: the bound on calls in flight belongs to each loop."""
    monkeypatch.setattr(http_engine, "MAX_CONNECTIONS", 1)  # every second call waits its turn
    body = json.dumps(ANSWER).encode()
    server = ScriptedServer(lambda _c, _n: (_whole(body), False))

    port = free_port()
    engine = HttpEngine(f"http://127.0.0.1:{port}/v1", timeout=10)

    async def main() -> list[Any]:
        listening = await asyncio.start_server(server.handle, "127.0.0.1", port)
        try:
            answers = await asyncio.gather(*(engine.complete(REQUEST) for _ in range(3)))
            return [a.body for a in answers]
        finally:
            await engine.aclose()
            listening.close()

    assert asyncio.run(main()) == asyncio.run(main()) == [ANSWER] * 3


# -- proxies ------------------------------------------------------------------------------------


class Proxy:
    """An HTTP proxy on loopback: plain requests (absolute target) are answered by forwarding
    to the engine; ``CONNECT`` opens a tunnel. It keeps each request head it received."""

    def __init__(self) -> None:
        self.heads: list[bytes] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        method, target, _ = head.split(b" ", 2)
        if method == b"CONNECT":
            host, _, port = target.decode().rpartition(":")
            upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
            return
        # A plain request: pass it on, then the answer back (one request per connection).
        address = target.split(b"/")[2].decode()
        host, _, port = address.rpartition(":")
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        upstream_writer.write(head)
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


async def _serve(handler: Any, tls: ssl.SSLContext | None = None) -> tuple[asyncio.Server, int]:
    server = await asyncio.start_server(handler, "127.0.0.1", 0, ssl=tls)
    return server, server.sockets[0].getsockname()[1]


def _answering(body: bytes) -> ScriptedServer:
    return ScriptedServer(lambda _c, _n: (_whole(body), True))


def test_a_plain_http_engine_is_reached_through_the_proxy_the_environment_names(
    loop: LoopFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As curl and httpx do: ``http_proxy`` applies, with its credentials, and the request
    names the whole URL; ``no_proxy`` lists hosts reached directly."""
    body = json.dumps(ANSWER).encode()
    engine_server, proxy = _answering(body), Proxy()

    async def main() -> tuple[Any, Any]:
        engine_listening, engine_port = await _serve(engine_server.handle)
        proxy_listening, proxy_port = await _serve(proxy.handle)
        monkeypatch.setenv("http_proxy", f"http://reef:s%40cret@127.0.0.1:{proxy_port}")
        proxied = HttpEngine(f"http://127.0.0.1:{engine_port}/v1", timeout=10)
        monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
        direct = HttpEngine(f"http://127.0.0.1:{engine_port}/v1", timeout=10)
        try:
            return (await proxied.complete(REQUEST)).body, (await direct.complete(REQUEST)).body
        finally:
            for engine in (proxied, direct):
                await engine.aclose()
            for listening in (engine_listening, proxy_listening):
                listening.close()

    assert run_on(loop, main()) == (ANSWER, ANSWER)
    (head,) = proxy.heads  # the direct call did not go through it
    assert head.startswith(b"POST http://127.0.0.1:")
    assert b"/v1/chat/completions HTTP/1.1\r\n" in head
    credentials = base64.b64encode(b"reef:s@cret")
    assert b"proxy-authorization: Basic " + credentials + b"\r\n" in head
    assert len(engine_server.requests) == 2


@pytest.fixture
def certificate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A self-signed certificate for 127.0.0.1, trusted by this process (``SSL_CERT_FILE``):
    the engine's server context."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to make a certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    command += ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1"]
    command += ["-addext", "subjectAltName=IP:127.0.0.1"]
    subprocess.run(command, check=True, capture_output=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def test_an_https_engine_is_reached_through_a_connect_tunnel(
    loop: LoopFactory, monkeypatch: pytest.MonkeyPatch, certificate: ssl.SSLContext
) -> None:
    """``https_proxy``: the proxy gets ``CONNECT host:port`` and sees only TLS after it; the
    engine's certificate is checked as on a direct connection."""
    body = json.dumps(ANSWER).encode()
    engine_server, proxy = _answering(body), Proxy()

    async def main() -> Any:
        engine_listening, engine_port = await _serve(engine_server.handle, certificate)
        proxy_listening, proxy_port = await _serve(proxy.handle)
        monkeypatch.setenv("https_proxy", f"127.0.0.1:{proxy_port}")
        engine = HttpEngine(f"https://127.0.0.1:{engine_port}/v1", timeout=10)
        try:
            return (await engine.complete(REQUEST)).body, engine_port
        finally:
            await engine.aclose()
            for listening in (engine_listening, proxy_listening):
                listening.close()

    answer, engine_port = run_on(loop, main())
    assert answer == ANSWER
    (head,) = proxy.heads
    assert head.startswith(f"CONNECT 127.0.0.1:{engine_port} HTTP/1.1\r\n".encode())
    assert engine_server.requests == [REQUEST]


def test_a_proxy_that_refuses_the_tunnel_is_a_502_naming_it(
    loop: LoopFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def main() -> Any:
        proxy_listening, proxy_port = await _serve(refuse)
        monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy_port}")
        engine = HttpEngine("https://engine.invalid:8443/v1", timeout=10)
        try:
            return await engine.complete(REQUEST)
        finally:
            await engine.aclose()
            proxy_listening.close()

    with pytest.raises(
        EngineError, match=r"refused a tunnel to engine.invalid:8443: 403"
    ) as caught:
        run_on(loop, main())
    assert caught.value.status == 502


def test_a_proxy_setting_of_another_kind_is_refused_when_the_engine_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("all_proxy", "socks5://reef:secret@127.0.0.1:1080")
    with pytest.raises(ValueError, match=r"'socks5://127.0.0.1:1080'.*not an http:// proxy") as e:
        HttpEngine("http://engine.example:8000/v1")
    assert "secret" not in str(e.value)  # the message reaches logs: no credentials in it
    monkeypatch.setenv("no_proxy", "engine.example")
    HttpEngine("http://engine.example:8000/v1")  # listed in no_proxy: reached directly
