"""What each inference route costs: chat completions, Responses and Messages, against the bare
engine, at the same load.

Processes, all on loopback (started as ``bench_server_load.py`` starts them): the scripted
engine (chat completions only), and Reef on a fresh SQLite file forwarding to it, each route
measured in turn by a load generator in a process of its own at the same open-loop rate. The
**bare endpoint** is the engine called directly with the same chat call: what a call costs
without Reef. For each target it prints p50/p99 latency and, for Reef's routes, Reef's CPU per
call; then each route's **overhead** (its p50 latency less the bare engine's, and Reef's CPU
per call) over the chat route's. A Responses or Messages call costs what a chat call does plus
its translation (the request to chat, the answer back) and a body encoded by Reef where chat
passes the engine's bytes on. Goal: each format's overhead within 1.2x of the chat route's.

    .venv/bin/python benchmarks/bench_api_formats.py [--rate 200] [--seconds 5] [--warmup 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench_server_load import DRAIN_SECONDS, Pool, cpu_seconds, start

GOAL_RATIO = 1.2
#: Each target's path and the body of its ``n``-th call (the same question in each format).
TARGETS: dict[str, tuple[str, Any]] = {
    "bare": (
        "/v1/chat/completions",
        lambda n: {"model": "m", "messages": [{"role": "user", "content": f"question {n}"}]},
    ),
    "chat": (
        "/scenarios/bench/v1/chat/completions",
        lambda n: {"model": "m", "messages": [{"role": "user", "content": f"question {n}"}]},
    ),
    "responses": (
        "/scenarios/bench/v1/responses",
        lambda n: {"model": "m", "input": f"question {n}"},
    ),
    "messages": (
        "/scenarios/bench/v1/messages",
        lambda n: {
            "model": "m",
            "max_tokens": 16,
            "messages": [{"role": "user", "content": f"question {n}"}],
        },
    ),
}


async def generate(port: int, target: str, rate: float, warmup: float, seconds: float) -> Any:
    """Open-loop calls of ``target`` at ``rate``; the measured window's figures."""
    pool = Pool(port, 64)
    path, body = TARGETS[target]
    latencies: list[float] = []
    errors = 0
    tasks: set[asyncio.Task[None]] = set()
    began = time.perf_counter()

    async def call(n: int, due: float, measured: bool) -> None:
        nonlocal errors
        try:
            status, _, _ = await pool.post(path, json.dumps(body(n)).encode())
        except (OSError, asyncio.IncompleteReadError, RuntimeError):
            status = 0
        if measured:
            latencies.append(time.perf_counter() - began - due)
            errors += status != 200

    n = 0
    while (due := n / rate) < warmup + seconds:
        await asyncio.sleep(max(0.0, due - (time.perf_counter() - began)))
        task = asyncio.ensure_future(call(n, due, due >= warmup))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        n += 1
    _, pending = await asyncio.wait(tasks, timeout=DRAIN_SECONDS) if tasks else (set(), set())
    ordered = sorted(latencies)
    return {
        "calls": len(latencies),
        "errors": errors + len(pending),
        "p50_ms": statistics.median(ordered) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
    }


def measure(target: str, port: int, args: argparse.Namespace, reef_pid: int | None) -> Any:
    command = [sys.executable, __file__, "--load", str(port), "--target", target]
    command += ["--rate", str(args.rate), "--seconds", str(args.seconds)]
    command += ["--warmup", str(args.warmup)]
    before = cpu_seconds(reef_pid) if reef_pid else 0.0
    out = subprocess.run(command, capture_output=True, check=True).stdout
    figures: dict[str, Any] = json.loads(out)
    if reef_pid:
        # Reef's CPU over warm-up and window alike, per call sent in them.
        sent = args.rate * (args.warmup + args.seconds)
        figures["cpu_ms"] = (cpu_seconds(reef_pid) - before) / sent * 1000
    return figures


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--load", type=int, help="(child) generate load against this port")
    parser.add_argument("--target", choices=tuple(TARGETS), default="chat")
    args = parser.parse_args()
    if args.load:
        figures = asyncio.run(
            generate(args.load, args.target, args.rate, args.warmup, args.seconds)
        )
        print(json.dumps(figures))
        return 0
    from reef.testing.service import free_port

    window = f"{args.warmup:.0f} s warm-up, {args.seconds:.0f} s measured"
    print(f"open loop at {args.rate:.0f} calls/s, {window}")
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory())
        storage = f"sqlite:///{folder}/reef.db"
        ports = {kind: free_port() for kind in ("engine", "reef")}
        engine = f"http://127.0.0.1:{ports['engine']}"
        processes = [start("engine", ports["engine"], "", storage)]
        try:
            processes.append(start("reef", ports["reef"], engine, storage))
            figures = {"bare": measure("bare", ports["engine"], args, None)}
            for target in ("chat", "responses", "messages"):
                figures[target] = measure(target, ports["reef"], args, processes[1].pid)
        finally:
            for process in processes:
                process.terminate()
                process.wait()
    for target, found in figures.items():
        cpu = f", Reef cpu {found['cpu_ms']:.2f} ms/call" if "cpu_ms" in found else ""
        print(
            f"{target:<10} p50 {found['p50_ms']:7.2f} ms  p99 {found['p99_ms']:7.2f} ms"
            f"  calls {found['calls']}, errors {found['errors']}{cpu}"
        )
    bare = figures["bare"]["p50_ms"]
    chat_latency = figures["chat"]["p50_ms"] - bare
    chat_cpu = figures["chat"]["cpu_ms"]
    met = True
    for target in ("responses", "messages"):
        latency = figures[target]["p50_ms"] - bare
        cpu_ratio = figures[target]["cpu_ms"] / chat_cpu
        print(
            f"{target} / chat overhead: latency {latency:.2f} / {chat_latency:.2f} ms"
            f" = {latency / chat_latency:.2f}x, Reef cpu {cpu_ratio:.2f}x"
        )
        met = met and cpu_ratio <= GOAL_RATIO
    verdict = "met" if met else "NOT met"
    print(f"goal (each format's Reef cpu per call within {GOAL_RATIO}x of chat's): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
