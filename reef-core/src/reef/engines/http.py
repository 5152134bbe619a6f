"""The HTTP engine: any OpenAI-compatible server (vLLM, SGLang, another Reef) by base URL.

:class:`HttpEngine` speaks HTTP/1.1 itself over keep-alive connections. The forward is on every
chat call's path and was most of the service's CPU through httpx (its connection pool walks
every open connection on each request); this one builds the request head once, encodes the
body once, and keeps idle connections on a stack. ``http`` and ``https`` URLs are served,
directly or through the HTTP proxy the environment names (``http_proxy``, ``https_proxy``,
``all_proxy``, with ``no_proxy``; an ``https`` engine through a ``CONNECT`` tunnel).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from typing import Final

import attrs

from reef.core.api_formats import CHAT_COMPLETIONS, MESSAGES, RESPONSES
from reef.core.records import JSON
from reef.engines.interface import ARTIFACT_HEADER, EngineAnswer, EngineError, EngineStream

__all__ = ["IDLE_CONNECTIONS", "MAX_CONNECTIONS", "HttpEngine"]

#: Where each format is asked, after the base URL.
_PATHS: Final = {
    CHAT_COMPLETIONS: "/chat/completions",
    RESPONSES: "/responses",
    MESSAGES: "/messages",
}


class HttpEngine:
    """An OpenAI-compatible server at ``base_url`` (``http://host:port/v1``).

    It speaks HTTP/1.1 itself over keep-alive connections (see the module docstring for why).
    Idle connections are kept up to :data:`IDLE_CONNECTIONS`; at most
    :data:`MAX_CONNECTIONS` calls are in flight at once (the rest wait for a slot).

    :param base_url: the engine's base URL, ending before ``/chat/completions``.
    :param api_key: sent as a bearer token when given.
    :param model: the model name to send when the client names none.
    :param timeout: seconds to wait for the engine (connect and each read).
    :param returns_tokens: the engine answers ``return_token_ids`` and ``logprobs`` with the
        tokens it sampled (vLLM, SGLang), so the service asks for them
        (:attr:`reef.engines.interface.ChatEngine.returns_tokens`).
    :param native_formats: the API formats it is asked in their own form, at ``/responses``
        and ``/messages`` beside ``/chat/completions``
        (:attr:`reef.engines.interface.ChatEngine.native_formats`).
    :raises ValueError: for a URL that is not http(s), or a proxy setting that applies to it
        and is not an ``http://`` proxy.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 600.0,
        returns_tokens: bool = False,
        native_formats: frozenset[str] = frozenset(),
    ) -> None:
        self.returns_tokens = returns_tokens
        self.native_formats = native_formats
        url = urllib.parse.urlsplit(base_url.rstrip("/"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"engine URL {base_url!r} is not an http(s) URL")
        self.model = model
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if url.scheme == "https" else None
        self._timeout = timeout
        self._proxy = _proxy_for(url)
        netloc = url.netloc.rpartition("@")[2]
        headers = f"authorization: Bearer {api_key}\r\n" if api_key else ""
        prefix = ""
        if self._proxy is not None and self._ssl is None:
            # Plain HTTP through a proxy: the whole URL as the target, the proxy's credentials.
            prefix = f"http://{netloc}"
            headers += self._proxy.authorization
        query = f"?{url.query}" if url.query else ""
        # Everything but the length and the body is the same on every call of a format: built
        # once for each.
        self._heads = {
            api_format: (
                f"POST {prefix}{url.path}{path}{query} HTTP/1.1\r\nhost: {netloc}\r\n"
                f"accept: */*\r\ncontent-type: application/json\r\n{headers}"
            ).encode("latin-1")
            for api_format, path in _PATHS.items()
            if api_format == CHAT_COMPLETIONS or api_format in native_formats
        }
        self._idle: list[_Connection] = []
        self._semaphore: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    def _slots(self) -> asyncio.Semaphore:
        """The bound on calls in flight, for the running event loop (an engine made with the
        application may serve it on more than one loop, one after the other)."""
        loop = asyncio.get_running_loop()
        if self._semaphore is None or self._semaphore[0] is not loop:
            self._semaphore = (loop, asyncio.Semaphore(MAX_CONNECTIONS))
        return self._semaphore[1]

    def _body(self, request: JSON) -> JSON:
        if self.model is not None and not request.get("model"):
            return {**request, "model": self.model}
        return request

    async def complete(self, request: JSON, *, api_format: str = CHAT_COMPLETIONS) -> EngineAnswer:
        async with self._slots():
            connection, response = await self._send(self._body(request), api_format)
            try:
                content = await response.read_all(connection, self._timeout)
            except _BROKEN as exc:
                connection.close()
                raise EngineError(502, f"the engine broke off its answer: {exc!r}") from exc
            self._release(connection, response)
        if response.status >= 400:
            raise _engine_error(response.status, content)
        try:
            body = json.loads(content)
        except ValueError as exc:
            raise EngineError(502, "the engine answered something that is not JSON") from exc
        if not isinstance(body, dict):
            raise EngineError(502, "the engine answered JSON that is not an object")
        return EngineAnswer(body, response.headers.get(ARTIFACT_HEADER), content)

    async def stream(self, request: JSON, *, api_format: str = CHAT_COMPLETIONS) -> EngineStream:
        slots = self._slots()
        await slots.acquire()
        try:
            connection, response = await self._send(
                {**self._body(request), "stream": True}, api_format
            )
        except BaseException:
            slots.release()
            raise
        if response.status >= 400:
            try:
                content = await response.read_all(connection, self._timeout)
            except _BROKEN as exc:
                connection.close()
                raise EngineError(502, f"the engine broke off its answer: {exc!r}") from exc
            else:
                self._release(connection, response)
            finally:
                slots.release()
            raise _engine_error(response.status, content)

        async def events() -> AsyncIterator[str]:
            finished = False
            try:
                pending = b""
                async for piece in response.pieces(connection, self._timeout):
                    lines = (pending + piece).split(b"\n")
                    pending = lines.pop()
                    for line in lines:
                        if line.startswith(b"data:"):
                            yield line[5:].strip().decode()
                if pending.startswith(b"data:"):
                    yield pending[5:].strip().decode()
                finished = True
            finally:
                # A stream left before its end leaves the connection mid-answer: not reusable.
                if finished:
                    self._release(connection, response)
                else:
                    connection.close()
                slots.release()

        return EngineStream(events(), response.headers.get(ARTIFACT_HEADER))

    async def _send(self, body: JSON, api_format: str) -> tuple[_Connection, _Response]:
        """Send one call (to ``api_format``'s path) and read the answer's head, on an idle
        connection or a new one."""
        payload = json.dumps(body).encode()
        head = self._heads[api_format]
        message = b"%scontent-length: %d\r\n\r\n%s" % (head, len(payload), payload)
        while True:
            reused = bool(self._idle)
            connection = self._idle.pop() if reused else await self._connect()
            if reused and (connection.reader.at_eof() or connection.writer.is_closing()):
                connection.close()  # the engine closed it while it was idle
                continue
            try:
                connection.writer.write(message)
                async with asyncio.timeout(self._timeout):
                    head = await connection.reader.readuntil(b"\r\n\r\n")
                return connection, _Response.parse(head)
            except (asyncio.IncompleteReadError, ConnectionResetError, BrokenPipeError) as exc:
                connection.close()
                # The engine closed a kept-alive connection as the call went out (its idle
                # timeout): not one byte of an answer came back, so the call was not taken;
                # send it again on another connection.
                partial = exc.partial if isinstance(exc, asyncio.IncompleteReadError) else b""
                if reused and not partial:
                    continue
                raise EngineError(502, f"the engine did not answer: {exc!r}") from exc
            except _BROKEN as exc:
                connection.close()
                raise EngineError(502, f"the engine did not answer: {exc!r}") from exc
            except BaseException:
                connection.close()
                raise

    async def _connect(self) -> _Connection:
        proxy = self._proxy
        try:
            async with asyncio.timeout(self._timeout):
                if proxy is None:
                    reader, writer = await asyncio.open_connection(
                        self._host, self._port, ssl=self._ssl, limit=_READ_LIMIT
                    )
                    return _Connection(reader, writer)
                reader, writer = await asyncio.open_connection(
                    proxy.host, proxy.port, limit=_READ_LIMIT
                )
                connection = _Connection(reader, writer)
                try:
                    if self._ssl is not None:
                        await self._tunnel(connection, proxy)
                        await writer.start_tls(self._ssl, server_hostname=self._host)
                except BaseException:
                    connection.close()
                    raise
                return connection
        except (OSError, TimeoutError, EOFError, ValueError) as exc:
            through = "" if proxy is None else f" through the proxy {proxy.host}:{proxy.port}"
            raise EngineError(502, f"the engine did not answer{through}: {exc!r}") from exc

    async def _tunnel(self, connection: _Connection, proxy: _Proxy) -> None:
        """Ask the proxy for a tunnel to the engine (``CONNECT``); :raises EngineError: when it
        refuses."""
        where = f"{self._host}:{self._port}"
        connection.writer.write(
            f"CONNECT {where} HTTP/1.1\r\nhost: {where}\r\n{proxy.authorization}\r\n".encode(
                "latin-1"
            )
        )
        answer = _Response.parse(await connection.reader.readuntil(b"\r\n\r\n"))
        if not 200 <= answer.status < 300:
            raise EngineError(
                502,
                f"the proxy {proxy.host}:{proxy.port} refused a tunnel to {where}: {answer.status}",
            )

    def _release(self, connection: _Connection, response: _Response) -> None:
        """Keep the connection for the next call when the answer was whole and it may stay open."""
        if (
            response.keep_alive
            and not connection.reader.at_eof()
            and len(self._idle) < IDLE_CONNECTIONS
        ):
            self._idle.append(connection)
        else:
            connection.close()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
        for connection in idle:
            with contextlib.suppress(OSError):
                await connection.writer.wait_closed()


#: Calls in flight to one engine at most (each on its own connection).
MAX_CONNECTIONS = 256
#: Idle keep-alive connections kept per engine.
IDLE_CONNECTIONS = 64
#: The longest answer head or chunk-size line read (asyncio's default is 64 KiB).
_READ_LIMIT = 1 << 20
#: What a connection that broke, timed out or answered something that is not HTTP raises.
_BROKEN = (OSError, EOFError, ValueError, TimeoutError, asyncio.LimitOverrunError)


@attrs.frozen
class _Proxy:
    """An HTTP proxy: where it listens, and the header that carries its credentials (if any)."""

    host: str
    port: int
    authorization: str


def _proxy_for(url: urllib.parse.SplitResult) -> _Proxy | None:
    """The proxy the environment sets for ``url``, read as curl and httpx read it:
    ``<scheme>_proxy`` or else ``all_proxy``, unless ``no_proxy`` names the host."""
    proxies = urllib.request.getproxies_environment()
    setting = proxies.get(url.scheme) or proxies.get("all")
    if not setting or urllib.request.proxy_bypass(url.netloc.rpartition("@")[2]):
        return None
    proxy = urllib.parse.urlsplit(setting if "://" in setting else f"http://{setting}")
    if proxy.scheme != "http" or not proxy.hostname:
        # Named without its credentials: this message reaches logs.
        shown = f"{proxy.scheme}://{proxy.hostname or ''}" + (
            f":{proxy.port}" if proxy.port else ""
        )
        raise ValueError(
            f"the proxy setting {shown!r} (for {url.scheme}://{url.hostname}) is not an"
            " http:// proxy, the only kind Reef speaks to; list the engine's host in no_proxy"
            " to reach it directly"
        )
    authorization = ""
    if proxy.username is not None:
        credentials = urllib.parse.unquote(proxy.username)
        credentials += ":" + urllib.parse.unquote(proxy.password or "")
        token = base64.b64encode(credentials.encode()).decode()
        authorization = f"proxy-authorization: Basic {token}\r\n"
    return _Proxy(proxy.hostname, proxy.port or 80, authorization)


@attrs.define
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter

    def close(self) -> None:
        self.writer.close()


@attrs.frozen
class _Response:
    """The head of an HTTP/1.1 answer, and how its body is framed."""

    status: int
    headers: dict[str, str]
    length: int | None
    chunked: bool
    keep_alive: bool

    @classmethod
    def parse(cls, head: bytes) -> _Response:
        """:raises ValueError: for a head that is not HTTP/1.x."""
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        if not version.startswith("HTTP/1."):
            raise ValueError(f"not an HTTP/1 answer: {lines[0][:80]!r}")
        status = int(rest[:3])
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = (
            None if chunked or "content-length" not in headers else int(headers["content-length"])
        )
        if status < 200 or status in (204, 304):
            length = 0
        keep_alive = (
            version == "HTTP/1.1"
            and headers.get("connection", "").lower() != "close"
            and (chunked or length is not None)
        )
        return cls(status, headers, length, chunked, keep_alive)

    async def pieces(self, connection: _Connection, timeout: float) -> AsyncIterator[bytes]:
        """The body as it arrives. :raises EOFError: when the engine closes it before its end."""
        reader = connection.reader
        if self.chunked:
            while True:
                async with asyncio.timeout(timeout):
                    size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
                    if size == 0:
                        while await reader.readuntil(b"\r\n") != b"\r\n":
                            pass  # trailers: nothing to keep
                        return
                    piece = await reader.readexactly(size + 2)
                yield piece[:-2]
        elif self.length is not None:
            left = self.length
            while left:
                async with asyncio.timeout(timeout):
                    piece = await reader.read(min(left, 1 << 16))
                if not piece:
                    raise EOFError(f"the body ended {left} bytes short")
                left -= len(piece)
                yield piece
        else:
            while True:
                async with asyncio.timeout(timeout):
                    piece = await reader.read(1 << 16)
                if not piece:
                    return
                yield piece

    async def read_all(self, connection: _Connection, timeout: float) -> bytes:
        """The whole body."""
        if self.length is not None and not self.chunked:
            async with asyncio.timeout(timeout):
                return await connection.reader.readexactly(self.length)
        return b"".join([piece async for piece in self.pieces(connection, timeout)])


def _engine_error(status: int, content: bytes) -> EngineError:
    try:
        body = json.loads(content)
    except ValueError:
        body = None
    shown = content[:300].decode("utf-8", errors="replace")
    # A 4xx is the client's mistake as the engine saw it; anything else is the engine's.
    return EngineError(
        status if 400 <= status < 500 else 502,
        f"the engine answered {status}: {shown}",
        body if isinstance(body, dict) else None,
    )
