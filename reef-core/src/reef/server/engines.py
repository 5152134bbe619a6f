"""The engines the inference service forwards to, and how a streamed answer is put together.

Two kinds, behind one interface (:class:`ChatEngine`):

- :class:`HttpEngine`: any OpenAI-compatible server (vLLM, SGLang, another Reef) by base URL,
  over keep-alive HTTP/1.1 connections it speaks itself. The forward is on every chat call's
  path and was most of the service's CPU through httpx (its connection pool walks every open
  connection on each request); this one builds the request head once, encodes the body once,
  and keeps idle connections on a stack. ``http`` and ``https`` URLs are served, directly or
  through the HTTP proxy the environment names (``http_proxy``, ``https_proxy``,
  ``all_proxy``, with ``no_proxy``; an ``https`` engine through a ``CONNECT`` tunnel);
- :class:`FunctionEngine`: an engine that is a function of the request (the built-in
  :class:`~reef.components.local_engine.LocalEngine`), run on a worker thread so the event loop
  never waits for the model. It streams by answering whole and sending the answer as chunks.

:class:`ChunkAssembler` rebuilds the full ``chat.completion`` body from the chunks of a stream,
so the recorded response is the same whether the client streamed or not.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

import anyio.to_thread
import attrs

from reef.core.records import JSON

__all__ = [
    "ARTIFACT_HEADER",
    "ChatEngine",
    "ChunkAssembler",
    "CompletionFunction",
    "EngineAnswer",
    "EngineError",
    "EngineStream",
    "FunctionEngine",
    "HttpEngine",
]

#: The response header by which an engine names the artifact that answered.
ARTIFACT_HEADER = "x-reef-artifact-id"


class EngineError(Exception):
    """The engine refused or failed a call before answering.

    :ivar status: the HTTP status to give the client (the engine's own for a 4xx, 502 when it
        could not be reached or failed).
    :ivar body: the engine's error body when it gave one.
    """

    def __init__(self, status: int, message: str, body: JSON | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


@attrs.frozen
class EngineAnswer:
    """A whole answer: the ``chat.completion`` body and the artifact that answered (if known).

    ``content`` is the body exactly as the engine sent it, when it came over HTTP: the service
    passes those bytes on to its client instead of encoding ``body`` again.
    """

    body: JSON
    artifact_id: str | None
    content: bytes | None = None


@attrs.frozen
class EngineStream:
    """A streamed answer that started: its SSE data payloads, and the artifact (if known).

    ``events`` yields each ``data:`` payload as text (``[DONE]`` last); it raises when the
    engine breaks off.
    """

    events: AsyncIterator[str]
    artifact_id: str | None


class ChatEngine(Protocol):
    """What the inference service needs of an engine."""

    async def complete(self, request: JSON) -> EngineAnswer:
        """Answer ``request`` whole. :raises EngineError: when it does not answer."""
        ...

    async def stream(self, request: JSON) -> EngineStream:
        """Start streaming the answer to ``request``.

        :raises EngineError: when the engine refuses before the first chunk.
        """
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


class CompletionFunction(Protocol):
    """An engine that is a function: ``complete(request) -> chat.completion`` (blocking)."""

    def complete(self, request: Mapping[str, Any]) -> JSON:
        """Answer a chat-completions request; ``ValueError`` for a request it cannot serve."""
        ...


class HttpEngine:
    """An OpenAI-compatible server at ``base_url`` (``http://host:port/v1``).

    It speaks HTTP/1.1 itself over keep-alive connections (see the module docstring for why).
    Idle connections are kept up to :data:`IDLE_CONNECTIONS`; at most
    :data:`MAX_CONNECTIONS` calls are in flight at once (the rest wait for a slot).

    :param base_url: the engine's base URL, ending before ``/chat/completions``.
    :param api_key: sent as a bearer token when given.
    :param model: the model name to send when the client names none.
    :param timeout: seconds to wait for the engine (connect and each read).
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
    ) -> None:
        url = urllib.parse.urlsplit(base_url.rstrip("/") + "/chat/completions")
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"engine URL {base_url!r} is not an http(s) URL")
        self.model = model
        self._host = url.hostname
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if url.scheme == "https" else None
        self._timeout = timeout
        self._proxy = _proxy_for(url)
        netloc = url.netloc.rpartition("@")[2]
        target = url.path + (f"?{url.query}" if url.query else "")
        headers = f"authorization: Bearer {api_key}\r\n" if api_key else ""
        if self._proxy is not None and self._ssl is None:
            # Plain HTTP through a proxy: the whole URL as the target, the proxy's credentials.
            target = f"http://{netloc}{target}"
            headers += self._proxy.authorization
        # Everything but the length and the body is the same on every call: built once.
        self._head = (
            f"POST {target} HTTP/1.1\r\nhost: {netloc}\r\n"
            f"accept: */*\r\ncontent-type: application/json\r\n{headers}"
        ).encode("latin-1")
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

    async def complete(self, request: JSON) -> EngineAnswer:
        async with self._slots():
            connection, response = await self._send(self._body(request))
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

    async def stream(self, request: JSON) -> EngineStream:
        slots = self._slots()
        await slots.acquire()
        try:
            connection, response = await self._send({**self._body(request), "stream": True})
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

    async def _send(self, body: JSON) -> tuple[_Connection, _Response]:
        """Send one call and read the answer's head, on an idle connection or a new one."""
        payload = json.dumps(body).encode()
        message = b"%scontent-length: %d\r\n\r\n%s" % (self._head, len(payload), payload)
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


class FunctionEngine:
    """A :class:`CompletionFunction` (the local engine) served on worker threads.

    The artifact that answered is the body's ``system_fingerprint``, as the local engine
    writes it.
    """

    def __init__(self, engine: CompletionFunction) -> None:
        self.engine = engine

    async def complete(self, request: JSON) -> EngineAnswer:
        try:
            body = await anyio.to_thread.run_sync(self.engine.complete, request)
        except ValueError as exc:
            raise EngineError(400, str(exc)) from exc
        fingerprint = body.get("system_fingerprint")
        return EngineAnswer(body, fingerprint if isinstance(fingerprint, str) else None)

    async def stream(self, request: JSON) -> EngineStream:
        answer = await self.complete(request)
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))

        async def events() -> AsyncIterator[str]:
            for chunk in chunks_of(answer.body, include_usage=include_usage):
                yield json.dumps(chunk)
            yield "[DONE]"

        return EngineStream(events(), answer.artifact_id)

    async def aclose(self) -> None:
        return None


def chunks_of(body: JSON, *, include_usage: bool) -> list[JSON]:
    """The ``chat.completion.chunk`` values that stream ``body`` (one delta per choice, then
    the finish reasons, then the usage when asked for)."""
    head = {
        "id": body.get("id"),
        "object": "chat.completion.chunk",
        "created": body.get("created", int(time.time())),
        "model": body.get("model"),
        "system_fingerprint": body.get("system_fingerprint"),
    }
    chunks: list[JSON] = []
    for choice in body.get("choices") or []:
        message = dict(choice.get("message") or {})
        delta: JSON = {"role": message.get("role", "assistant")}
        for key in ("content", "reasoning_content", "refusal"):
            if message.get(key) is not None:
                delta[key] = message[key]
        if message.get("tool_calls"):
            delta["tool_calls"] = [
                {**call, "index": position} for position, call in enumerate(message["tool_calls"])
            ]
        chunks.append(
            {
                **head,
                "choices": [
                    {
                        "index": choice.get("index", 0),
                        "delta": delta,
                        "logprobs": choice.get("logprobs"),
                        "finish_reason": None,
                    }
                ],
            }
        )
        chunks.append(
            {
                **head,
                "choices": [
                    {
                        "index": choice.get("index", 0),
                        "delta": {},
                        "finish_reason": choice.get("finish_reason"),
                    }
                ],
            }
        )
    if include_usage:
        chunks.append({**head, "choices": [], "usage": body.get("usage")})
    return chunks


class ChunkAssembler:
    """Rebuilds a ``chat.completion`` body from the chunks of a stream, as they arrive."""

    def __init__(self) -> None:
        self._head: JSON = {}
        self._choices: dict[int, JSON] = {}
        self._usage: JSON | None = None
        self.done = False

    def add(self, chunk: JSON) -> None:
        """Take one chunk (a parsed ``data:`` payload)."""
        for key in ("id", "created", "model", "system_fingerprint"):
            if chunk.get(key) is not None:
                self._head.setdefault(key, chunk[key])
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        for piece in chunk.get("choices") or []:
            if not isinstance(piece, dict):
                continue
            index = piece.get("index", 0)
            choice = self._choices.setdefault(
                index if isinstance(index, int) else 0,
                {"message": {"role": "assistant"}, "finish_reason": None, "logprobs": None},
            )
            self._merge_delta(choice["message"], piece.get("delta") or {})
            if piece.get("finish_reason") is not None:
                choice["finish_reason"] = piece["finish_reason"]
            logprobs = piece.get("logprobs")
            if isinstance(logprobs, dict):
                merged = choice["logprobs"] or {"content": []}
                merged["content"] = list(merged.get("content") or []) + list(
                    logprobs.get("content") or []
                )
                choice["logprobs"] = merged

    @staticmethod
    def _merge_delta(message: JSON, delta: JSON) -> None:
        for key, value in delta.items():
            if key == "tool_calls" and isinstance(value, list):
                calls: list[JSON] = message.setdefault("tool_calls", [])
                for part in value:
                    ChunkAssembler._merge_tool_call(calls, part)
            elif isinstance(value, str) and key != "role":
                message[key] = (message.get(key) or "") + value
            elif value is not None:
                message[key] = value

    @staticmethod
    def _merge_tool_call(calls: list[JSON], part: Any) -> None:
        if not isinstance(part, dict):
            return
        index = part.get("index", len(calls))
        while len(calls) <= index:
            calls.append(
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
            )
        call = calls[index]
        if part.get("id"):
            call["id"] = part["id"]
        if part.get("type"):
            call["type"] = part["type"]
        function = part.get("function") or {}
        for key in ("name", "arguments"):
            if isinstance(function.get(key), str):
                call["function"][key] += function[key]

    def body(self) -> JSON:
        """The ``chat.completion`` body of the chunks taken so far."""
        choices = []
        for index in sorted(self._choices):
            choice = self._choices[index]
            message = dict(choice["message"])
            message.setdefault("content", None)
            choices.append(
                {
                    "index": index,
                    "message": message,
                    "finish_reason": choice["finish_reason"],
                    "logprobs": choice["logprobs"],
                }
            )
        body: JSON = {**self._head, "object": "chat.completion", "choices": choices}
        if self._usage is not None:
            body["usage"] = self._usage
        return body
