"""Agent ECC: re-execution throughput at a capacity, and what the Preparer hides from the seal.

1. Efficiency: a seal that must re-execute n checks of known duration d with capacity c, its
   wall time against the ideal ceil(n/c) x d (goal: at least 90%). Three backends: the local
   pool; the re-verification service over HTTP on loopback (its executor sleeps d); and the
   service with the real executor (a git checkout of the calc snapshot, then an eval script that
   sleeps d: the checkout and patch are overhead the ideal does not count).
2. Prepared re-execution: groups produced after a grader fix wait in the buffer one check's
   duration before their seal. The share of re-execution time hidden from the seal is
   1 - (seal time with the Preparer) / (seal time without), the two measured in alternating
   steps of the same run (goal: at least 80%).

    .venv/bin/python benchmarks/bench_ecc_reexec.py
"""

from __future__ import annotations

import importlib.util
import json
import math
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import attrs

from agent_ecc import (
    Candidate,
    ContentStore,
    DirectoryRegistry,
    LocalBackend,
    Member,
    Preparer,
    Scorer,
    SealSession,
)
from agent_ecc.backends import Backend
from agent_ecc.execution import ExecRequest, RawOutput
from agent_ecc.recompute.executor import Executor
from agent_ecc.recompute.service import HTTPBackend, ReverifyService
from agent_ecc.store import put_text
from agent_ecc.synthetic import SyntheticExecutor, SyntheticWorld

ROOT = Path(__file__).resolve().parents[1]


class Sleeping(Executor):
    """An executor whose every run takes ``duration`` seconds (the synthetic world's output)."""

    def __init__(self, store: ContentStore, duration: float) -> None:
        super().__init__(store, isolate_network=False)
        self.duration = duration
        self.synthetic = SyntheticExecutor(store)

    def run(self, request: ExecRequest) -> RawOutput:
        threading.Event().wait(self.duration)  # the check's known duration
        return self.synthetic.run(request)


def _world(root: Path, tasks: int) -> tuple[ContentStore, SyntheticWorld, DirectoryRegistry]:
    store = ContentStore(root / "store")
    world = SyntheticWorld(store, [f"t{i}" for i in range(tasks)])
    registry = DirectoryRegistry(root / "registry")
    registry.publish_grader(world.version(0), source="startup")
    registry.publish_world(world.world(), source="startup")
    registry.publish_grader(world.version(1), source="fix")
    return store, world, registry


def _groups(world: SyntheticWorld, registry: DirectoryRegistry, tasks: range, prefix: str):
    """One member per task, four per group, recorded without runs: each needs one execution."""
    g0 = registry.grader("g0")
    members = []
    for t in tasks:
        record, score = world.produce(g0, f"t{t}", f"{prefix}{t}", "correct")
        members.append(Member(record.record_id, attrs.evolve(record, runs=()), score, 1.0))
    return [
        Candidate(f"{prefix}g{i}", None, tuple(members[i : i + 4]))
        for i in range(0, len(members), 4)
    ]


def _against_ideal(n: int, c: int, d: float, wall: float) -> dict[str, Any]:
    """The wall time of n checks of duration d at capacity c against ceil(n/c) x d."""
    ideal = math.ceil(n / c) * d
    return {
        "n": n,
        "capacity": c,
        "duration_s": d,
        "wall_s": round(wall, 3),
        "ideal_s": ideal,
        "efficiency": round(ideal / wall, 3),
    }


def _efficiency(backend: Backend, n: int, c: int, d: float, root: Path) -> dict[str, Any]:
    _, world, registry = _world(root, n)
    scorer = Scorer([world.adapter], world.store, backend=backend)
    groups = _groups(world, registry, range(n), "e")
    start = time.perf_counter()
    decision = SealSession(registry, scorer, "1").assemble(groups).decision
    wall = time.perf_counter() - start
    assert decision.stats["executions"] == n, decision.stats
    return _against_ideal(n, c, d, wall)


def _real(n: int, c: int, d: float, root: Path) -> dict[str, Any]:
    path = ROOT / "reef-ecc" / "tests" / "fixtures" / "make_fixtures.py"
    spec = importlib.util.spec_from_file_location("agent_ecc_bench_fixtures", path)
    assert spec is not None
    assert spec.loader is not None
    fixtures_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixtures_module)
    store = ContentStore(root / "real-store")
    fixtures = fixtures_module.make_fixtures(store)
    script = put_text(store, f"sleep {d}\n")
    check = fixtures.adapter.check(
        "sleep", image=fixtures.image, eval_script=script, suite={}, timeout_s=30.0
    )
    record = fixtures.adapter.record(
        store=store,
        task_id="calc-1",
        trajectory_id="r",
        image="w",
        patch=fixtures.patches["gold"],
        runs=[],
    )
    requests = [fixtures.adapter.request(check, record, store)] * n  # the backend has no cache
    with ReverifyService(store, capacity=c) as service:
        backend = HTTPBackend(service.url, capacity=c)
        start = time.perf_counter()
        outs = [f.result() for f in [backend.submit(r) for r in requests]]
        wall = time.perf_counter() - start
        backend.close()
    assert all(isinstance(o, RawOutput) and o.exit_code == 0 for o in outs), outs
    return _against_ideal(n, c, d, wall)


def _hidden(steps: int, per_step: int, c: int, d: float, root: Path) -> dict[str, Any]:
    store, world, registry = _world(root, steps * per_step * 2)
    backend = LocalBackend(Sleeping(store, d).run, capacity=c)
    scorer = Scorer([world.adapter], store, backend=backend)
    preparer = Preparer(registry, scorer, capacity=c, threads=True, poll_s=0.05)
    seconds = {"with": 0.0, "without": 0.0}
    task = 0
    for step in range(steps):
        for mode in ("with", "without"):  # alternating, so the shared machine's noise falls on both
            groups = _groups(world, registry, range(task, task + per_step), f"{mode}{step}-")
            task += per_step
            if mode == "with":
                for group in groups:
                    preparer.admit(group)  # the coordinator admits them into the buffer
            threading.Event().wait(d)  # they wait in the buffer one check's duration
            session = SealSession(
                registry, scorer, f"{mode}{step}", prepared=preparer if mode == "with" else None
            )
            start = time.perf_counter()
            session.finish(session.assemble(groups))
            seconds[mode] += time.perf_counter() - start
    preparer.close()
    return {
        "steps": steps,
        "checks_per_step": per_step,
        "capacity": c,
        "duration_s": d,
        "seal_s_with_preparer": round(seconds["with"], 3),
        "seal_s_without": round(seconds["without"], 3),
        "hidden_share": round(1 - seconds["with"] / seconds["without"], 3),
    }


def main() -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="bench-ecc-reexec-"))
    local_store = ContentStore(root / "local" / "store")
    local = LocalBackend(Sleeping(local_store, 0.2).run, capacity=8)
    results: dict[str, Any] = {"local": _efficiency(local, 64, 8, 0.2, root / "local")}
    http_store = ContentStore(root / "http" / "store")
    with ReverifyService(http_store, executor=Sleeping(http_store, 0.25), capacity=4) as service:
        http = HTTPBackend(service.url, capacity=4)
        results["http"] = _efficiency(http, 32, 4, 0.25, root / "http")
        http.close()
    results["http_real_executor"] = _real(8, 4, 1.0, root)
    results["prepared"] = _hidden(5, 8, 8, 0.3, root / "prepared")
    return results


if __name__ == "__main__":
    print(json.dumps(main(), indent=2))
    sys.exit(0)
