"""Agent ECC: what a seal itself costs per member, beside grading the same logs afresh.

A batch of 10,000 members (1,250 groups of 8, SWE-bench logs of the synthetic world, graded by
the real SWE-bench adapter) is sealed twice: under the epoch it was graded with (every decision
is a reuse) and under the grader fix (every decision is a re-parse of the stored log; the
behaviours are chosen so that none is decided by evidence). The baseline, measured in the same
run and in alternating rounds: grading every member's stored log afresh under the fix's spec
(read the log from the store, parse it, apply the rule), which is what a trainer without agent
ECC would do to re-grade. Prints microseconds per member and the ratios to the baseline.

    .venv/bin/python benchmarks/bench_ecc_seal.py [MEMBERS]
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from agent_ecc import Candidate, ContentStore, DirectoryRegistry, Member, Scorer, SealSession
from agent_ecc.synthetic import WORLD, SyntheticWorld
from agent_ecc.versions import iter_checks

BEHAVIOURS = ("correct", "wrong", "skip", "crash")
GROUP = 8
ROUNDS = 3


def main(members: int) -> dict[str, object]:
    root = Path(tempfile.mkdtemp(prefix="bench-ecc-seal-"))
    store = ContentStore(root / "store")
    tasks = [f"t{i}" for i in range(16)]
    world = SyntheticWorld(store, tasks)
    # two registries: one stays at the startup epoch (reuse), one has the fix (re-parse)
    registries = {}
    for name in ("reuse", "reparse"):
        registries[name] = DirectoryRegistry(root / name)
        registries[name].publish_grader(world.version(0), source="startup")
        registries[name].publish_world(world.world(), source="startup")
    fix = world.version(1)
    registries["reparse"].publish_grader(fix, source="fix")
    g0 = registries["reuse"].grader("g0")
    candidates = []
    for g in range(members // GROUP):
        group = []
        for i in range(GROUP):
            behaviour = BEHAVIOURS[(g + i) % len(BEHAVIOURS)]
            record, score = world.produce(g0, tasks[g % len(tasks)], f"g{g}m{i}", behaviour)
            group.append(Member(record.record_id, record, score, 1.0 if score.passed else 0.0))
        candidates.append(Candidate(f"g{g}", None, tuple(group)))
    scorer = Scorer([world.adapter], store)

    def seal(kind: str, batch: str) -> tuple[float, dict[str, int]]:
        start = time.perf_counter()
        decision = SealSession(registries[kind], scorer, batch).assemble(candidates).decision
        return time.perf_counter() - start, decision.stats["decisions"]

    def fresh() -> float:
        start = time.perf_counter()
        for candidate in candidates:
            for member in candidate.members:
                record = member.execution
                assert record is not None
                for check in iter_checks(fix.lookup(record.task_id, WORLD).spec):
                    run = next(
                        r for r in record.runs if r.execution_identity == check.execution_identity
                    )
                    world.adapter.grade(check, run, store)
        return time.perf_counter() - start

    reuse, reparse, baseline = [], [], []
    kinds: dict[str, dict[str, int]] = {}
    for r in range(ROUNDS):  # alternating, so that noise of the shared machine falls on all
        seconds, kinds["reuse"] = seal("reuse", str(r))
        reuse.append(seconds)
        baseline.append(fresh())
        seconds, kinds["reparse"] = seal("reparse", str(r))
        reparse.append(seconds)
    n = len(candidates) * GROUP
    per = {
        "seal_reuse_us": statistics.median(reuse) / n * 1e6,
        "seal_reparse_us": statistics.median(reparse) / n * 1e6,
        "fresh_grading_us": statistics.median(baseline) / n * 1e6,
    }
    return {
        "members": n,
        "decisions": kinds,
        **{k: round(v, 1) for k, v in per.items()},
        "reuse_over_fresh": round(per["seal_reuse_us"] / per["fresh_grading_us"], 3),
        "reparse_over_fresh": round(per["seal_reparse_us"] / per["fresh_grading_us"], 3),
        "reparse_overhead_us": round(per["seal_reparse_us"] - per["fresh_grading_us"], 1),
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000), indent=2))
