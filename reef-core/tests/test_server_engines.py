"""``HttpEngine`` against engines on loopback that misbehave the ways real servers do.

The service forwards each chat call over kept-alive HTTP/1.1 connections of its own. An engine
closes an idle connection when its keep-alive timeout runs out; the call that next picks that
connection must then go out again on a new one, but only when not one byte of an answer came
back (otherwise the engine may have taken it, and a second generation is not ours to start).
Each test runs a small asyncio server that answers as scripted and counts what it received.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

pytest.importorskip("anyio")

from reef.server.engines import EngineError, HttpEngine

ANSWER = {"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant"}}]}
REQUEST = {"messages": [{"role": "user", "content": "hi"}]}


def _whole(body: bytes, *, status: str = "200 OK") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode() + body


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


def run(server: ScriptedServer, calls: Callable[[HttpEngine], Awaitable[Any]]) -> Any:
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

    return asyncio.run(main())


def test_a_connection_the_engine_closed_while_idle_is_not_used_again() -> None:
    """The engine answers, keeps the connection 'alive', then closes it (its idle timeout
    ran out): the next call goes out on a new connection and is answered."""
    body = json.dumps(ANSWER).encode()
    server = ScriptedServer(lambda _c, _n: (_whole(body), True))

    async def calls(engine: HttpEngine) -> list[Any]:
        first = await engine.complete(REQUEST)
        await asyncio.sleep(0.2)  # the close reaches the idle connection
        second = await engine.complete(REQUEST)
        return [first.body, second.body]

    assert run(server, calls) == [ANSWER, ANSWER]
    assert server.connections == 2
    assert len(server.requests) == 2


def test_a_call_that_meets_the_idle_close_is_sent_again_once_on_a_new_connection() -> None:
    """The engine takes the second call on a kept-alive connection and closes it without a
    byte back (it timed the connection out as the call arrived): the call is sent again on
    a new connection, and answered."""
    body = json.dumps(ANSWER).encode()
    server = ScriptedServer(lambda c, n: None if (c, n) == (0, 1) else (_whole(body), False))

    async def calls(engine: HttpEngine) -> list[Any]:
        return [(await engine.complete(REQUEST)).body for _ in range(2)]

    assert run(server, calls) == [ANSWER, ANSWER]
    assert server.connections == 2
    assert len(server.requests) == 3  # the second call reached the engine twice


def test_a_new_connection_closed_without_an_answer_fails_and_is_not_repeated() -> None:
    server = ScriptedServer(lambda _c, _n: None)

    async def calls(engine: HttpEngine) -> Any:
        return await engine.complete(REQUEST)

    with pytest.raises(EngineError, match="did not answer") as caught:
        run(server, calls)
    assert caught.value.status == 502
    assert len(server.requests) == 1


def test_an_answer_broken_off_halfway_fails_and_is_not_repeated() -> None:
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
        run(server, calls)
    assert caught.value.status == 502
    assert len(server.requests) == 2


def test_a_chunked_answer_is_read_whole_and_its_bytes_kept() -> None:
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

    first, second = run(server, calls)
    assert first.body == second.body == ANSWER
    assert first.content == body
    assert server.connections == 1  # kept alive after a whole chunked answer


def test_the_engines_4xx_is_the_clients_and_keeps_its_body() -> None:
    refusal = {"error": {"message": "max_tokens is too large", "type": "invalid_request_error"}}
    answer = _whole(json.dumps(refusal).encode(), status="400 Bad Request")
    server = ScriptedServer(lambda _c, _n: (answer, False))

    async def calls(engine: HttpEngine) -> Any:
        return await engine.complete(REQUEST)

    with pytest.raises(EngineError) as caught:
        run(server, calls)
    assert caught.value.status == 400
    assert caught.value.body == refusal
