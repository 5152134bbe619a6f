"""The soak: ``reef serve`` under steady load for minutes, its memory, files and threads sampled.

Runs the TinyGPT deployment of the end-to-end tests (``reef.testing.serve``: the local engine
answering, the local component training jobs of 8 samples) without auth, on SQLite in a fresh
folder, and keeps it busy with what a deployment sees all day: an agent's rounds of chat calls
and their reports (``ScriptedAgent``, 4 calls a group), a streamed call, the console's reads
(status, a page of samples, the job history) and a data item uploaded, attached, detached and
deleted, round after round. Every ``--interval`` seconds it reads the ``reef serve`` process's
resident memory, open file descriptors and threads from ``/proc`` and prints them.

At the end it prints the figures once the warm-up (the first fifth of the run, at least one
sample) is over: the least-squares slope of each (per minute) and its range. RSS is flat when it
grows by at most ``--max-rss-slope`` MiB a minute; file descriptors and threads when they end no
higher than their highest during the warm-up plus ``--slack``. The exit status is 1 when any is
not flat, so a nightly job fails on a leak. Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from reef.testing.serve import ScriptedAgent, ServeProcess, tiny_local_deployment

SCENARIO = "word"


def process_figures(pid: int) -> tuple[float, int, int]:
    """The RSS (MiB), open file descriptors and threads of process ``pid``."""
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    rss_kib = int(fields["VmRSS"].split()[0])
    return rss_kib / 1024, len(os.listdir(f"/proc/{pid}/fd")), int(fields["Threads"])


class Load:
    """The load: one thread of agent rounds, one of everything else, counting what they did
    and the first error each met (a soak that errors is no soak)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.stop = threading.Event()
        self.calls = 0
        self.reads = 0
        self.items = 0
        self.errors: list[str] = []
        self._threads = [
            threading.Thread(target=self._guarded, args=(self._agent,), daemon=True),
            threading.Thread(target=self._guarded, args=(self._others,), daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        self.stop.set()
        for thread in self._threads:
            thread.join(120)

    def _guarded(self, work: Any) -> None:
        try:
            work()
        except Exception as exc:  # reported at the end, and it ends the soak's verdict
            self.errors.append(f"{work.__name__}: {exc!r}")
            self.stop.set()

    def _agent(self) -> None:
        agent = ScriptedAgent(SCENARIO)
        while not self.stop.is_set():
            agent.round(self.base_url)
            self.calls += agent.group

    def _others(self) -> None:
        scenario = f"{self.base_url}/reef/scenarios/{SCENARIO}"
        chat = {"model": "local", "messages": [{"role": "user", "content": "Say ok."}],
                "max_tokens": 3, "stream": True}  # fmt: skip
        trajectory = {
            "schema_version": "ATIF-v1.8",
            "session_id": "soak",
            "agent": {"name": "soak", "version": "1"},
            "steps": [
                {"step_id": 1, "source": "user", "message": "Say ok."},
                {"step_id": 2, "source": "agent", "message": "ok"},
            ],
        }
        with httpx.Client(timeout=60) as client:
            n = 0
            while not self.stop.wait(0.5):
                for path in ("/reef/status", f"{scenario}/samples?limit=25", f"{scenario}/jobs"):
                    url = path if path.startswith("http") else f"{self.base_url}{path}"
                    client.get(url).raise_for_status()
                    self.reads += 1
                with client.stream(
                    "POST", f"{self.base_url}/scenarios/{SCENARIO}/v1/chat/completions", json=chat
                ) as streamed:
                    streamed.raise_for_status()
                    for _ in streamed.iter_lines():
                        pass
                item = f"soak-item-{n}"
                body = {"id": item, "trajectory": {**trajectory, "session_id": item}}
                client.post(f"{self.base_url}/reef/items", json=body).raise_for_status()
                client.post(f"{scenario}/items/{item}").raise_for_status()
                client.delete(f"{scenario}/items/{item}").raise_for_status()
                client.delete(f"{self.base_url}/reef/items/{item}").raise_for_status()
                self.items += 1
                n += 1


def slope(points: Sequence[tuple[float, float]]) -> float:
    """The least-squares slope of ``(minutes, value)`` points, per minute."""
    if len(points) < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / len(points)
    mean_v = sum(v for _, v in points) / len(points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / spread if spread else 0.0


def wait_until_served(base_url: str) -> None:
    """Return once the trainer published its first weights: the local engine answers then."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        trainer = httpx.get(f"{base_url}/reef/status", timeout=60).json()["scenarios"][0]
        if trainer["trainers"][0]["served_artifact"] is not None:
            return
        time.sleep(0.5)  # polls the status the trainer writes
    raise SystemExit("soak: the trainer published no weights within two minutes")


def jobs_trained(base_url: str) -> int:
    answer = httpx.get(f"{base_url}/reef/scenarios/{SCENARIO}/jobs?limit=500", timeout=60)
    return sum(1 for job in answer.json()["jobs"] if job["event"] == "finished")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="how long (%(default)s)")
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--max-rss-slope", type=float, default=1.0, help="MiB a minute, at most")
    parser.add_argument("--slack", type=int, default=4, help="fds or threads beyond the warm-up")
    parser.add_argument("--folder", type=Path, default=None, help="keep the store and log here")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    folder = args.folder or Path(tempfile.mkdtemp(prefix="reef-soak-"))
    folder.mkdir(parents=True, exist_ok=True)
    deployment = tiny_local_deployment(folder, f"sqlite:///{folder / 'reef.db'}")
    print(f"soak folder: {folder}; {args.minutes} minutes, a sample every {args.interval} s")
    serve = ServeProcess(deployment, folder / "serve.log")
    load = Load(serve.base_url)
    samples: list[tuple[float, float, int, int]] = []
    try:
        wait_until_served(serve.base_url)
        load.start()
        started = time.monotonic()
        print(f"{'minute':>7} {'RSS MiB':>8} {'fds':>5} {'threads':>8} {'calls':>6} {'items':>6}")
        while True:
            elapsed = (time.monotonic() - started) / 60
            rss, fds, threads = process_figures(serve.process.pid)
            samples.append((elapsed, rss, fds, threads))
            print(
                f"{elapsed:7.2f} {rss:8.1f} {fds:5d} {threads:8d} {load.calls:6d} {load.items:6d}"
            )
            if elapsed >= args.minutes or load.stop.wait(args.interval):
                break
        trained = jobs_trained(serve.base_url)
    finally:
        load.join()
        serve.terminate() if serve.process.poll() is None else None
    warm = max(1, len(samples) // 5)
    settled = samples[warm - 1 :]
    figures: dict[str, Any] = {"minutes": samples[-1][0], "samples": len(samples),
                               "calls": load.calls, "reads": load.reads, "items": load.items,
                               "jobs_trained": trained, "errors": load.errors}  # fmt: skip
    verdicts = []
    for index, name, unit in ((1, "rss", "MiB"), (2, "fds", ""), (3, "threads", "")):
        values = [(s[0], float(s[index])) for s in settled]
        per_minute = slope(values)
        low, high = min(v for _, v in values), max(v for _, v in values)
        warm_high = max(float(s[index]) for s in samples[:warm])
        if name == "rss":
            flat = per_minute <= args.max_rss_slope
        else:
            flat = values[-1][1] <= warm_high + args.slack
        verdicts.append(flat)
        figures[name] = {"slope_per_minute": round(per_minute, 3), "low": low, "high": high,
                         "end": values[-1][1], "flat": flat}  # fmt: skip
        print(f"{name}: {per_minute:+.3f} {unit}/min after the warm-up, {low:g} to {high:g},"
              f" ends at {values[-1][1]:g}: {'flat' if flat else 'NOT FLAT'}")  # fmt: skip
    print(f"load: {load.calls} chat calls and reports, {load.reads} reads, {load.items} item"
          f" cycles, {trained} jobs trained; errors: {load.errors or 'none'}")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=2), encoding="utf-8")
    return 0 if all(verdicts) and not load.errors else 1


if __name__ == "__main__":
    sys.exit(main())
