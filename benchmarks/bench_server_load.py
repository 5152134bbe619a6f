"""Load on the service: inference records and reports at a fixed rate, against a bare baseline.

Processes, all on loopback: the scripted engine, Reef on a fresh SQLite file (synchronous=FULL,
the default) forwarding to it, a bare Starlette endpoint that does no work (the baseline), and
for each target a **load generator in a process of its own**, so its work is not the server's.

The load is **open loop**: request ``k`` is due at ``start + k / rate`` whatever the answers,
and its latency runs from when it was due (a late send counts against the server, so a queue
cannot hide). The mix is fixed: requests alternate between a chat call (a new conversation,
so an inference record) and a report on one earlier chat call that was answered (each
answered call is reported once). A warm-up at the same rate comes first and is not measured;
it also stocks the answered calls the first reports refer to. The load generator speaks
HTTP/1.1 on raw keep-alive connections (a pool), so it spends microseconds per request, not
the milliseconds an HTTP client library would.

For each target it prints the rate asked, the rate answered (answers that arrived inside the
measured window, per second), p50/p99 of every request and of each kind, errors, and the CPU
each process used; then Reef's figures over the bare endpoint's. Goal: at 500 req/s, p99 under
50 ms on SQLite.

Rounds (``--rounds``, 3 by default) alternate which target goes first, and each starts fresh
processes (engine, bare endpoint, Reef on a fresh store, one load generator per target, whose
report ids are its own); the figures compared are the medians over the rounds.

``--postgres URL`` stores Reef's records in a fresh schema of that PostgreSQL database (dropped
afterwards) instead of SQLite. ``--busy N`` keeps N more processes spinning on the CPU for the
whole run (both targets), to see how much room is left when the machine has other work.

**The cpu check.** Each target's own cpu per request it was sent is printed, and Reef's over
the bare endpoint's (the median of the rounds' ratios). ``--cpu-reference FILE`` holds that
ratio to the one ``FILE`` records for the same workload, and exits 1 when it grew by more than
25%: a change that makes each call dearer fails, whatever the machine's speed, because both
targets are measured in the same run. ``benchmarks/server_cpu_reference.json`` is the
reference the test suite checks against (``tests/test_benchmark_server_load.py``);
``--write-cpu-reference FILE`` records a new one (after a change that is meant to cost more,
or that made calls cheaper).

    .venv/bin/python benchmarks/bench_server_load.py [--rate 500] [--seconds 10] [--warmup 3]
        [--busy 0] [--rounds 3] [--postgres postgresql+psycopg://postgres@127.0.0.1:5432/test]
        [--cpu-reference FILE] [--write-cpu-reference FILE]
    .venv/bin/python benchmarks/bench_server_load.py --rate 200 --seconds 2 --warmup 0.5 \
        --cpu-reference benchmarks/server_cpu_reference.json
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

GOAL_RATE = 500
#: How much Reef's cpu per request over the bare endpoint's may grow against its reference.
CPU_GROWTH_LIMIT = 1.25
GOAL_P99_MS = 50.0
#: Keep-alive connections of the load generator (more are opened only up to this).
CONNECTIONS = 128
#: How long the load generator waits for the answers still due after the window.
DRAIN_SECONDS = 30.0
TOKEN = "bench-token-0123456789"


# -- the servers (child processes) -----------------------------------------------------------


def serve(kind: str, port: int, engine: str, storage: str) -> None:
    """Run one of the three servers in this process (the child side)."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from reef.plugins import Plugins
    from reef.plugins.scenarios import load_deployment
    from reef.server import create_app, open_databases
    from reef.testing.engines import scripted_engine

    if kind == "engine":
        app = scripted_engine()
    elif kind == "bare":

        async def nothing(request: object) -> JSONResponse:
            return JSONResponse({})

        app = Starlette(routes=[Route("/{path:path}", nothing, methods=["GET", "POST"])])
    else:
        text = f"""
storage: {{url: "{storage}"}}
serving: {{engine: "{engine}/v1"}}
auth: {{tokens: {{{TOKEN}: {{token: {TOKEN}, scopes: [infer, feedback, admin]}}}}}}
scenarios:
  bench: {{recipe: "reef.testing.service:ServiceTestRecipe"}}
"""
        plugins = Plugins()
        deployment = load_deployment(text, plugins=plugins)
        app = create_app(deployment, databases=open_databases(deployment), plugins=plugins)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start(kind: str, port: int, engine: str, storage: str) -> subprocess.Popen[bytes]:
    import httpx

    command = [sys.executable, __file__, "--serve", kind, "--port", str(port)]
    command += ["--engine", engine, "--storage", storage]
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the load generator (a child process) ----------------------------------------------------


class Connection:
    """One keep-alive HTTP/1.1 connection; requests on it go one at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    async def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        head = (
            f"POST {path} HTTP/1.1\r\nhost: bench\r\nauthorization: Bearer {TOKEN}\r\n"
            f"content-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n"
        )
        self.writer.write(head.encode() + body)
        lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        if "content-length" not in headers:
            raise RuntimeError(f"an answer without content-length: {headers}")
        return status, headers, await self.reader.readexactly(int(headers["content-length"]))


class Pool:
    """At most ``size`` connections to ``port``; a request waits for a free one."""

    def __init__(self, port: int, size: int) -> None:
        self.port = port
        self.free: asyncio.Queue[Connection] = asyncio.Queue()
        self.room = asyncio.Semaphore(size)

    async def post(self, path: str, body: bytes) -> tuple[int, dict[str, str], bytes]:
        async with self.room:
            try:
                connection = self.free.get_nowait()
            except asyncio.QueueEmpty:
                connection = Connection(*await asyncio.open_connection("127.0.0.1", self.port))
            try:
                answer = await connection.post(path, body)
            except BaseException:
                connection.writer.close()
                raise
            self.free.put_nowait(connection)
            return answer


async def generate(
    port: int, rate: float, warmup: float, seconds: float, run: str
) -> dict[str, Any]:
    """Run the open-loop load; the measured window's figures. ``run`` names this generator's
    report ids, unique to it."""
    pool = Pool(port, CONNECTIONS)
    answered_calls: collections.deque[str] = collections.deque()
    chat_path = "/scenarios/bench/v1/chat/completions"
    report_path = "/reef/scenarios/bench/reports"
    results: list[tuple[str, float, float, int]] = []  # kind, due, answered at, status
    tasks: set[asyncio.Task[None]] = set()
    measured_from = warmup
    measured_to = warmup + seconds

    async def request(kind: str, n: int, due: float, measured: bool, reference: str) -> None:
        if kind == "chat":
            messages = [{"role": "user", "content": f"question {n}"}]
            path, body = chat_path, json.dumps({"messages": messages})
        else:
            path, body = (
                report_path,
                json.dumps({"id": f"report-{run}-{n}", "references": [reference], "score": 1.0}),
            )
        try:
            status, headers, _ = await pool.post(path, body.encode())
        except (OSError, asyncio.IncompleteReadError, RuntimeError):
            status, headers = 0, {}
        done = time.perf_counter() - began
        if kind == "chat" and status == 200:
            answered_calls.append(headers.get("x-reef-record-id", f"none-{n}"))
        if measured:
            results.append((kind, due, done, status))

    began = time.perf_counter()
    sent = collections.Counter[str]()
    late = []
    n = 0
    while True:
        due = n / rate
        if due >= measured_to:
            break
        # The schedule of an open-loop load (a late generator still lets answers in).
        await asyncio.sleep(max(0.0, due - (time.perf_counter() - began)))
        measured = due >= measured_from
        if measured:
            late.append(time.perf_counter() - began - due)
        # The fixed mix: chat, report, chat, report...; a report needs an answered call.
        kind = "report" if n % 2 and answered_calls else "chat"
        reference = answered_calls.popleft() if kind == "report" else ""
        sent[kind] += measured
        task = asyncio.ensure_future(request(kind, n, due, measured, reference))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        n += 1
    _, pending = await asyncio.wait(tasks, timeout=DRAIN_SECONDS) if tasks else (set(), set())
    for task in pending:
        task.cancel()
    answered_in_window = sum(1 for _, _, done, _ in results if done <= measured_to)
    figures: dict[str, Any] = {
        "asked_rate": rate,
        "answered_rate": answered_in_window / seconds,
        "sent": dict(sent),
        "unanswered": len(pending),
        "errors": collections.Counter(
            str(status) for _, _, _, status in results if status >= 400 or status == 0
        ),
        "send_lag_p99_ms": _percentile(late, 0.99) * 1000,
        "requests": n,
    }
    for kind in ("all", "chat", "report"):
        latencies = [done - due for k, due, done, _ in results if kind in ("all", k)]
        latencies += [DRAIN_SECONDS] * (len(pending) if kind == "all" else 0)
        if latencies:
            figures[kind] = {
                "p50_ms": statistics.median(latencies) * 1000,
                "p99_ms": _percentile(latencies, 0.99) * 1000,
            }
    return figures


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * fraction))] if ordered else 0.0


# -- the run ---------------------------------------------------------------------------------


def measure(
    name: str, port: int, args: argparse.Namespace, servers: dict[str, int]
) -> dict[str, Any]:
    """Run one load generator process against ``port``; its figures and the CPU used."""
    command = [sys.executable, __file__, "--load", str(port), "--rate", str(args.rate)]
    command += ["--run", f"{name}-{time.time_ns()}"]
    command += ["--seconds", str(args.seconds), "--warmup", str(args.warmup)]
    before = {kind: cpu_seconds(pid) for kind, pid in servers.items()}
    began = time.perf_counter()
    generator = subprocess.Popen(command, stdout=subprocess.PIPE)
    out, _ = generator.communicate()
    wall = time.perf_counter() - began
    if generator.returncode != 0:
        raise RuntimeError(f"the load generator failed against {name}: {generator.returncode}")
    figures: dict[str, Any] = json.loads(out)
    # CPU over the whole run of the generator (warm-up, window, drain), as cores busy.
    used = {kind: cpu_seconds(pid) - before[kind] for kind, pid in servers.items()}
    figures["cpu"] = {kind: seconds / wall for kind, seconds in used.items()}
    # The target's own CPU per request it was sent (warm-up and window), in milliseconds.
    figures["cpu_per_request_ms"] = used[name] / figures["requests"] * 1000
    figures["cpu"]["load generator"] = figures.pop("generator_cpu") / wall
    return figures


def show(name: str, figures: dict[str, Any]) -> None:
    print(f"{name}:")
    print(
        f"  asked {figures['asked_rate']:.0f} req/s, answered {figures['answered_rate']:.0f} req/s"
        f" in the window; sent {figures['sent']}, errors {dict(figures['errors']) or 0},"
        f" unanswered {figures['unanswered']}, send lag p99 {figures['send_lag_p99_ms']:.1f} ms"
    )
    for kind in ("all", "chat", "report"):
        if kind in figures:
            p50, p99 = figures[kind]["p50_ms"], figures[kind]["p99_ms"]
            print(f"  {kind:<7} p50 {p50:8.1f} ms   p99 {p99:8.1f} ms")
    cpu = ", ".join(f"{kind} {share:.2f}" for kind, share in figures["cpu"].items())
    print(f"  cpu (cores busy): {cpu}; its cpu per request {figures['cpu_per_request_ms']:.3f} ms")


def run_round(
    args: argparse.Namespace, order: tuple[str, str], free_port: Callable[[], int]
) -> dict[str, dict[str, Any]]:
    """One round: a fresh engine, bare endpoint and Reef (on a fresh store), each target
    measured by a fresh load generator, in ``order``."""
    with contextlib.ExitStack() as stack:
        if args.postgres:
            from reef.testing.storage import postgres_schema_url

            storage = stack.enter_context(postgres_schema_url(args.postgres))
        else:
            folder = stack.enter_context(tempfile.TemporaryDirectory())
            storage = f"sqlite:///{folder}/reef.db"
        ports = {kind: free_port() for kind in ("engine", "bare", "reef")}
        engine = f"http://127.0.0.1:{ports['engine']}"
        processes = {"engine": start("engine", ports["engine"], "", storage)}
        try:
            processes["bare"] = start("bare", ports["bare"], "", storage)
            processes["reef"] = start("reef", ports["reef"], engine, storage)
            watched = {
                "bare": {"bare": processes["bare"].pid},
                "reef": {"reef": processes["reef"].pid, "engine": processes["engine"].pid},
            }
            return {name: measure(name, ports[name], args, watched[name]) for name in order}
        finally:
            for process in processes.values():
                process.terminate()
                process.wait()


def _value(figures: dict[str, Any], key: str) -> float:
    return float(figures[key] if key == "answered_rate" else figures["all"][key])


def spread(rounds: list[dict[str, Any]], key: str) -> str:
    """The median of ``key`` over the rounds, with the lowest and highest."""
    values = [_value(figures, key) for figures in rounds]
    return f"{statistics.median(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


def summary(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over the rounds of the answered rate and of each latency figure."""
    return {
        "answered_rate": statistics.median(_value(f, "answered_rate") for f in rounds),
        "all": {
            key: statistics.median(_value(f, key) for f in rounds) for key in ("p50_ms", "p99_ms")
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rate", type=float, default=GOAL_RATE)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--serve", choices=["engine", "bare", "reef"])
    parser.add_argument("--load", type=int, help="(child) generate load against this port")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--engine", default="")
    parser.add_argument("--storage", default="", help="(child) Reef's database URL")
    parser.add_argument(
        "--postgres",
        default="",
        metavar="URL",
        help="store Reef's records in a fresh schema of this PostgreSQL database, not SQLite",
    )
    parser.add_argument("--busy", type=int, default=0, help="processes spinning on the CPU")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds, each with fresh processes and store"
    )
    parser.add_argument("--run", default="", help="(child) the load generator's report ids")
    parser.add_argument(
        "--cpu-reference",
        type=Path,
        metavar="FILE",
        help="fail (exit 1) when Reef's cpu per request over the bare endpoint's grows by more"
        f" than {CPU_GROWTH_LIMIT - 1:.0%} against the ratio this file records",
    )
    parser.add_argument(
        "--write-cpu-reference",
        type=Path,
        metavar="FILE",
        help="record this run's cpu ratio in FILE, as the reference of later checks",
    )
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.engine, args.storage)
        return 0
    if args.load:
        figures = asyncio.run(generate(args.load, args.rate, args.warmup, args.seconds, args.run))
        figures["generator_cpu"] = time.process_time()
        print(json.dumps(figures))
        return 0
    from reef.testing.service import free_port

    if args.cpu_reference:
        reference_ratio(args)  # before the run: a reference of another workload fails at once
    print(
        f"open loop at {args.rate:.0f} req/s, {args.warmup:.0f} s warm-up then {args.seconds:.0f} s"
        f" measured; cpus: {os.cpu_count()}; load average before: {os.getloadavg()};"
        f" busy processes: {args.busy}"
    )
    busy: list[subprocess.Popen[bytes]] = []
    spin = [sys.executable, "-c", "while True: pass"]
    busy += [subprocess.Popen(spin) for _ in range(args.busy)]
    label = "Reef (PostgreSQL)" if args.postgres else "Reef (SQLite, synchronous=FULL)"
    rounds: dict[str, list[dict[str, Any]]] = {"bare": [], "reef": []}
    try:
        for number in range(args.rounds):
            # Alternate which target goes first, so that a drift of the machine's load falls
            # on both alike.
            order = ("bare", "reef") if number % 2 == 0 else ("reef", "bare")
            print(f"round {number + 1} of {args.rounds} ({' then '.join(order)}):")
            for name, figures in run_round(args, order, free_port).items():
                show(label if name == "reef" else "bare Starlette (baseline)", figures)
                rounds[name].append(figures)
    finally:
        for process in busy:
            process.terminate()
            process.wait()
    bare, reef = (summary(rounds[name]) for name in ("bare", "reef"))
    for key, name in (("bare", "bare Starlette (baseline)"), ("reef", label)):
        print(
            f"{name}, median of {args.rounds} rounds [lowest, highest]: answered"
            f" {spread(rounds[key], 'answered_rate')} req/s,"
            f" p50 {spread(rounds[key], 'p50_ms')} ms, p99 {spread(rounds[key], 'p99_ms')} ms"
        )
    print(
        f"Reef / bare: answered rate {reef['answered_rate'] / bare['answered_rate']:.2f},"
        f" p50 {reef['all']['p50_ms'] / bare['all']['p50_ms']:.1f}x,"
        f" p99 {reef['all']['p99_ms'] / bare['all']['p99_ms']:.1f}x"
    )
    met = reef["answered_rate"] >= args.rate * 0.95 and reef["all"]["p99_ms"] < GOAL_P99_MS
    aside = " (the goal is set on SQLite; PostgreSQL is for comparison)" if args.postgres else ""
    print(
        f"goal ({args.rate:.0f} req/s, p99 < {GOAL_P99_MS:.0f} ms): {'met' if met else 'NOT met'}"
        f"{aside}"
    )
    print(f"load average after: {os.getloadavg()}")
    return check_cpu(args, rounds)


def reference_ratio(args: argparse.Namespace) -> float:
    """The ratio ``--cpu-reference`` records, once its workload is found to be this run's.

    :raises SystemExit: when the run's workload is another (a ratio measured on another workload
        says nothing of this one).
    """
    reference = json.loads(args.cpu_reference.read_text())
    run = {"rate": args.rate, "seconds": args.seconds, "warmup": args.warmup}
    if reference["workload"] != run:
        raise SystemExit(
            f"{args.cpu_reference} records the ratio of the workload {reference['workload']};"
            f" this run's is {run}: run that one, or write a new reference"
        )
    return float(reference["ratio"])


def check_cpu(args: argparse.Namespace, rounds: dict[str, list[dict[str, Any]]]) -> int:
    """Print Reef's cpu per request over the bare endpoint's (the median of the rounds' ratios,
    each round's two targets measured beside each other), and hold it to ``--cpu-reference``."""
    ratios = [
        reef["cpu_per_request_ms"] / bare["cpu_per_request_ms"]
        for reef, bare in zip(rounds["reef"], rounds["bare"], strict=True)
    ]
    ratio = statistics.median(ratios)
    reef_ms = statistics.median(f["cpu_per_request_ms"] for f in rounds["reef"])
    bare_ms = statistics.median(f["cpu_per_request_ms"] for f in rounds["bare"])
    print(
        f"cpu per request: Reef {reef_ms:.3f} ms, bare {bare_ms:.3f} ms;"
        f" Reef / bare {ratio:.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    if args.write_cpu_reference:
        reference = {
            "ratio": round(ratio, 3),
            "workload": {"rate": args.rate, "seconds": args.seconds, "warmup": args.warmup},
            "rounds": [round(r, 3) for r in ratios],
            "cpus": os.cpu_count(),
        }
        args.write_cpu_reference.write_text(json.dumps(reference, indent=2) + "\n")
        print(f"wrote the reference ratio {ratio:.2f} to {args.write_cpu_reference}")
    if not args.cpu_reference:
        return 0
    expected = reference_ratio(args)
    limit = expected * CPU_GROWTH_LIMIT
    passed = ratio <= limit
    print(
        f"cpu check: Reef / bare {ratio:.2f} against the reference {expected:.2f}"
        f" (limit {limit:.2f}): {'passed' if passed else 'FAILED'}"
    )
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
