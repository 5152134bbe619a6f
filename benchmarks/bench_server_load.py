"""Load on the service: inference records and reports posted by concurrent clients.

Starts three uvicorn processes on loopback: the scripted engine, Reef on a fresh SQLite file
(synchronous=FULL, the default) forwarding to it, and a bare Starlette endpoint that does no work
(the baseline). Each client runs agent turns: a chat call through Reef (one inference record),
then a report on that call (one admitted report). The same requests go to the bare endpoint.

Two phases per target, for a fixed time each:

- closed loop: CLIENTS clients send as fast as answers come (the most it takes);
- open loop: requests started at RATE per second whatever the answers (the latency at a load).

Prints requests per second and p50/p99 latency. Goal: at 500 req/s, p99 under 50 ms on SQLite.

    .venv/bin/python benchmarks/bench_server_load.py [--seconds 10] [--rate 500]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable

import httpx

CLIENTS = 32
GOAL_RATE = 500
GOAL_P99_MS = 50.0


def serve(kind: str, port: int, engine: str, folder: str) -> None:
    """Run one of the three servers in this process (the child side)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from reef.core.deployment import load_deployment
    from reef.core.plugins import Plugins
    from reef.server import create_app, open_databases
    from reef.server.testing import scripted_engine

    if kind == "engine":
        app = scripted_engine()
    elif kind == "bare":

        async def nothing(request: object) -> JSONResponse:
            return JSONResponse({})

        app = Starlette(routes=[Route("/{path:path}", nothing, methods=["GET", "POST"])])
    else:
        text = f"""
storage: {{url: "sqlite:///{folder}/reef.db"}}
serving: {{engine: "{engine}/v1"}}
auth: {{tokens: {{bench: {{token: bench, scopes: [infer, feedback, admin]}}}}}}
scenarios:
  bench: {{recipe: "reef.server.testing:ServiceTestRecipe"}}
"""
        plugins = Plugins()
        deployment = load_deployment(text, plugins=plugins)
        app = create_app(deployment, databases=open_databases(deployment), plugins=plugins)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start(kind: str, port: int, engine: str, folder: str) -> subprocess.Popen[bytes]:
    command = [sys.executable, __file__, "--serve", kind, "--port", str(port)]
    command += ["--engine", engine, "--folder", folder]
    process = subprocess.Popen(command)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/openapi.json", timeout=1)
            return process
        except httpx.TransportError:
            if process.poll() is not None:
                raise RuntimeError(f"the {kind} server exited: {process.returncode}") from None
            time.sleep(0.1)  # waiting for another process to listen: nothing to wait on
    raise RuntimeError(f"the {kind} server did not start")


Turn = Callable[[httpx.AsyncClient, int], Awaitable[list[float]]]


def agent_turn(base: str) -> Turn:
    """A chat call, then a report on it; the latency of each request, in seconds."""
    headers = {"authorization": "Bearer bench"}

    async def turn(client: httpx.AsyncClient, n: int) -> list[float]:
        messages = [{"role": "user", "content": f"question {n}"}]
        started = time.perf_counter()
        answer = await client.post(
            f"{base}/scenarios/bench/v1/chat/completions", json={"messages": messages},
            headers=headers,
        )  # fmt: skip
        middle = time.perf_counter()
        answer.raise_for_status()
        record_id = answer.headers.get("x-reef-record-id", f"none-{n}")
        report = {"id": f"report-{n}", "references": [record_id], "score": 1.0}
        reported = await client.post(
            f"{base}/reef/scenarios/bench/reports", json=report, headers=headers
        )
        ended = time.perf_counter()
        reported.raise_for_status()
        return [middle - started, ended - middle]

    return turn


async def closed_loop(turn: Turn, seconds: float, offset: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    counter = iter(range(offset, offset + 10**9))
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:

        async def worker() -> None:
            while time.perf_counter() < stop:
                latencies.extend(await turn(client, next(counter)))

        began = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CLIENTS)))
        elapsed = time.perf_counter() - began
    return len(latencies) / elapsed, latencies


async def open_loop(
    turn: Turn, seconds: float, rate: float, offset: int
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=256)
    async with httpx.AsyncClient(limits=limits, timeout=httpx.Timeout(60, pool=None)) as client:
        tasks = []
        began = time.perf_counter()
        # Each turn is two requests: start turns at half the request rate.
        interval = 2 / rate
        for n in range(int(seconds * rate / 2)):
            delay = began + n * interval - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)  # the schedule of an open-loop load
            tasks.append(asyncio.ensure_future(turn(client, offset + n)))
        failed = 0
        for done in await asyncio.gather(*tasks, return_exceptions=True):
            if isinstance(done, BaseException):
                failed += 1
            else:
                latencies.extend(done)
        if failed:
            print(f"  ({failed} turns failed: the server could not keep up)")
        elapsed = time.perf_counter() - began
    return len(latencies) / elapsed, latencies


def summary(name: str, rate: float, latencies: list[float]) -> tuple[float, float]:
    ordered = sorted(latencies)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    print(f"  {name:<28} {rate:8.0f} req/s   p50 {p50:7.1f} ms   p99 {p99:7.1f} ms")
    return p50, p99


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=GOAL_RATE)
    parser.add_argument("--serve", choices=["engine", "bare", "reef"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--engine", default="")
    parser.add_argument("--folder", default="")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.engine, args.folder)
        return 0
    from reef.server.testing import free_port

    with tempfile.TemporaryDirectory() as folder:
        ports = {kind: free_port() for kind in ("engine", "bare", "reef")}
        engine = f"http://127.0.0.1:{ports['engine']}"
        processes = [start("engine", ports["engine"], "", folder)]
        try:
            processes.append(start("bare", ports["bare"], "", folder))
            processes.append(start("reef", ports["reef"], engine, folder))
            print(f"{CLIENTS} clients closed loop, then {args.rate:.0f} req/s open loop,"
                  f" {args.seconds:.0f} s each; cpus: {os.cpu_count()}")  # fmt: skip
            results = {}
            for name, base in (
                ("bare Starlette (baseline)", f"http://127.0.0.1:{ports['bare']}"),
                ("reef (SQLite, FULL sync)", f"http://127.0.0.1:{ports['reef']}"),
            ):
                offset = 0 if name.startswith("bare") else 10**6
                turn = agent_turn(base)
                rate, latencies = asyncio.run(closed_loop(turn, args.seconds, offset))
                summary(f"{name}, closed", rate, latencies)
                rate, latencies = asyncio.run(
                    open_loop(turn, args.seconds, args.rate, offset + 10**5)
                )
                results[name] = (rate, *summary(f"{name}, open", rate, latencies))
            rate, _, p99 = results["reef (SQLite, FULL sync)"]
            met = rate >= args.rate * 0.95 and p99 < GOAL_P99_MS
            verdict = "met" if met else "NOT met"
            print(f"goal ({args.rate:.0f} req/s, p99 < {GOAL_P99_MS:.0f} ms): {verdict}")
        finally:
            for process in processes:
                process.terminate()
                process.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
