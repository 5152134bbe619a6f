"""The whole lifecycle of the integration guide on synthetic data.

Publication (g0 at startup, the world), trajectories pinned and graded under their epoch,
admission, seals under each epoch while fixes are published (g1: the 4.1 grading bugs fixed;
g2: a hardened suite added), rewards applied, learner consumption lines, then the consumption
records and both audits. Run: ``python examples/lifecycle/run.py OUT_DIR``; prints a JSON summary.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent_ecc import (
    Candidate,
    ContentStore,
    DirectoryRegistry,
    LocalBackend,
    Member,
    RecordingBackend,
    Scorer,
    SealJournal,
    SealSession,
    apply_rewards,
    audit_epochs,
    consumption_records,
    verdict_conflicts,
)
from agent_ecc.records import dump_jsonl
from agent_ecc.synthetic import SyntheticExecutor, SyntheticWorld

TASKS = ("t1", "t2", "t3")
# One group per (task, step): four attempts whose behaviours differ in what each epoch sees.
GROUPS = [
    ("correct", "wrong", "skip", "crash"),
    ("correct", "shallow", "empty", "noapply"),
    ("shallow", "correct", "crash", "wrong"),
    ("skip", "skip", "correct", "infra"),
]


class Sample:
    """The trainer's own sample: it carries its member id and reward to the learner."""

    def __init__(self, member_id: str, group_id: str, reward: float) -> None:
        self.member_id = member_id
        self.group_id = group_id
        self.reward = reward


def run(out: Path) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    store = ContentStore(out / "store")
    world = SyntheticWorld(store, TASKS)
    registry = DirectoryRegistry(out / "registry")
    registry.publish_grader(world.version(0), source="startup")
    registry.publish_world(world.world(), source="startup")
    executor = SyntheticExecutor(store)
    backend = RecordingBackend(LocalBackend(executor.run, capacity=4), out / "executions.jsonl")
    scorer = Scorer([world.adapter], store, backend=backend)
    journal = SealJournal(out / "seals.jsonl")
    records: dict[str, Any] = {}
    scores: dict[str, Any] = {}
    buffer: list[tuple[Candidate, list[Sample]]] = []

    def rollout(step: int) -> None:
        for g, behaviours in enumerate(GROUPS):
            pin = registry.resolve_start()
            version = registry.grader(pin.epoch.version_id)
            task = TASKS[(step + g) % len(TASKS)]
            group_id = f"s{step}g{g}"
            members, samples = [], []
            for i, behaviour in enumerate(behaviours):
                attempt = f"{group_id}m{i}"
                record, recorded = world.produce(version, task, attempt, behaviour)
                dump_jsonl(out / "records.jsonl", [record])
                dump_jsonl(out / "scores.jsonl", [recorded])
                records[attempt], scores[attempt] = record, recorded
                sample = Sample(attempt, group_id, 1.0 if recorded.passed else 0.0)
                samples.append(sample)
                members.append(Member(attempt, record, recorded, sample.reward))
            buffer.append((Candidate(group_id, handle=samples, members=tuple(members)), samples))

    def take(need: int, considered: frozenset[str], remaining_s: float) -> list[Candidate]:
        del remaining_s
        return [c for c, _ in buffer if c.group_id not in considered][:need]

    learner = open(out / "learner.jsonl", "w")  # noqa: SIM115 - kept open over the loop
    completions = open(out / "completions.jsonl", "w")  # noqa: SIM115
    summary: list[dict[str, Any]] = []
    fixes = {2: (1, "fix: skipped F2P and exit code"), 4: (2, "fix: hardened suite")}
    for step in range(6):
        if step in fixes:
            index, source = fixes[step]
            registry.publish_grader(world.version(index), source=source)
        rollout(step)
        selected = [c for c, _ in buffer[:2]]
        session = SealSession(registry, scorer, batch_id=str(step))
        assembly = session.assemble(selected, backfill=take, deadline_s=30.0)
        decision = session.finish(assembly, journal=journal)
        handed = {c.group_id for c, _ in assembly.batch}
        decided = handed | {c.group_id for c, _ in assembly.excluded}
        samples = [s for c, ss in buffer if c.group_id in handed for s in ss]
        buffer[:] = [(c, ss) for c, ss in buffer if c.group_id not in decided]
        apply_rewards(
            decision,
            samples,
            member_id=lambda s: s.member_id,
            set_reward=lambda s, r: setattr(s, "reward", r),
        )
        for s in samples:
            line = {
                "batch_id": str(step),
                "member_id": s.member_id,
                "group_id": s.group_id,
                "step": step,
                "reward": s.reward,
                "identity": "verified",
                "reporter": "dp0",
                "microbatch": 0,
            }
            learner.write(json.dumps(line) + "\n")
        completions.write(
            json.dumps(
                {"batch_id": str(step), "step": step, "completed_at": time.time(), "ok": True}
            )
            + "\n"
        )
        summary.append(
            {
                "step": step,
                "epoch": decision.epoch.index,
                "decisions": decision.stats["decisions"],
                "shortfall": decision.shortfall,
                "executions": decision.stats["executions"],
            }
        )
    learner.close()
    completions.close()
    decisions = journal.read()
    lines = [json.loads(x) for x in (out / "learner.jsonl").read_text().splitlines()]
    done = [json.loads(x) for x in (out / "completions.jsonl").read_text().splitlines()]
    report = consumption_records(decisions, lines, done)
    epochs = audit_epochs(decisions, registry)
    versions = [registry.grader(e.version_id) for e in registry.epochs()]
    conflicts = verdict_conflicts(
        list(records.values()), list(scores.values()), versions, [world.adapter], store
    )
    return {
        "steps": summary,
        "manifest_ok": report.manifest.ok,
        "mismatches": list(report.manifest.mismatches),
        "epochs_ok": epochs.ok,
        "unexpected": list(epochs.unexpected),
        "conflicts": len(conflicts),
        "executed": sum(executor.runs.values()),
    }


if __name__ == "__main__":
    target = (
        Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="ecc-lifecycle-"))
    )
    print(json.dumps(run(target), indent=2))
