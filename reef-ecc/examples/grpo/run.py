"""agent_ecc in a plain GRPO loop (docs/ecc/integrating.md), with no trainer framework at all.

The "policy" is a softmax over the synthetic world's attempt behaviours (correct, wrong, skip,
crash): each step it samples a group of attempts per task, the rollout worker grades each
attempt under the epoch it was pinned to, and the groups wait in a buffer (asynchronous RL: a
step trains the groups rolled out by the step before). Before each policy-gradient step the
trainer seals the buffered groups under the epoch in force, applies the sealed rewards and
computes group-relative advantages. At step 3 a grader fix is published (the 4.1 rules' bugs
fixed: a skipped test and a crashing run no longer pass): the groups graded under the old epoch
then train with the fixed rewards, their stored logs re-parsed. The learner writes one
consumption line per sample; at the end the consumption records and the epoch audit check that
every step trained what its seal decided.

Run: ``python examples/grpo/run.py [OUT_FOLDER]``; prints a JSON summary.
"""

from __future__ import annotations

import json
import math
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from agent_ecc import (
    Candidate,
    ContentStore,
    DirectoryRegistry,
    LocalBackend,
    Member,
    Scorer,
    SealJournal,
    SealSession,
    apply_rewards,
    audit_epochs,
    consumption_records,
)
from agent_ecc.records import dump_jsonl
from agent_ecc.synthetic import SyntheticExecutor, SyntheticWorld

TASKS = ("t1", "t2")
ACTIONS = ("correct", "wrong", "skip", "crash")  # skip and crash pass under g0's 4.1 rules
GROUP_SIZE = 4
STEPS = 8
FIX_AT = 3  # the step before which g1 is published
LEARNING_RATE = 0.5


class Sample:
    """The trainer's own sample: the action taken, its member id and its reward."""

    def __init__(self, member_id: str, group_id: str, action: int, reward: float) -> None:
        self.member_id = member_id
        self.group_id = group_id
        self.action = action
        self.reward = reward


def softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    return [w / sum(weights) for w in weights]


def run(out: Path, seed: int = 7) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    logits = [0.0] * len(ACTIONS)

    # Once per run: the registry every component sees, the startup grader, then its world.
    store = ContentStore(out / "store")
    world = SyntheticWorld(store, TASKS)
    registry = DirectoryRegistry(out / "registry")
    registry.publish_grader(world.version(0), source="startup")
    registry.publish_world(world.world(), source="startup")
    # The trainer's seal: a scorer (with a backend for re-executions) and a journal.
    scorer = Scorer([world.adapter], store, backend=LocalBackend(SyntheticExecutor(store).run))
    journal = SealJournal(out / "seals.jsonl")
    learner = out / "learner.jsonl"
    completions = out / "completions.jsonl"
    history = []

    buffer: list[Candidate] = []  # groups rolled out, waiting for their seal
    samples: dict[str, list[Sample]] = {}
    for step in range(STEPS):
        if step == FIX_AT:  # a grader fix, published while training runs
            registry.publish_grader(world.version(1), source="fix: 4.1 grading bugs")
        candidates, buffer = buffer, []

        # Rollouts: each trajectory pins its epoch before it starts, and is graded under it.
        for task in TASKS:
            pin = registry.resolve_start()
            version = registry.grader(pin.epoch.version_id)
            group_id = f"s{step}-{task}"
            members, group = [], []
            for i in range(GROUP_SIZE):
                action = rng.choices(range(len(ACTIONS)), weights=softmax(logits))[0]
                attempt = f"{group_id}-{i}"
                record, score = world.produce(version, task, attempt, ACTIONS[action])
                dump_jsonl(out / "records.jsonl", [record])
                dump_jsonl(out / "scores.jsonl", [score])
                sample = Sample(attempt, group_id, action, 1.0 if score.passed else 0.0)
                group.append(sample)
                members.append(Member(attempt, record, score, sample.reward))
            samples[group_id] = group
            buffer.append(Candidate(group_id, handle=group, members=tuple(members)))
        if not candidates:
            continue  # the first step only rolls out

        # Before the optimizer step: seal the batch under the epoch in force, apply its rewards.
        session = SealSession(registry, scorer, batch_id=str(step))
        try:
            assembly = session.assemble(candidates, deadline_s=60.0)
            decision = session.finish(assembly, journal=journal)
            batch = [s for c, _ in assembly.batch for s in samples[c.group_id]]
        except Exception as error:  # strict: an undecided batch trains nothing
            decision = session.fail(error, candidates, journal=journal)
            batch = [s for c in candidates for s in samples[c.group_id]]
        apply_rewards(
            decision,
            batch,
            member_id=lambda s: s.member_id,
            set_reward=lambda s, r: setattr(s, "reward", r),
        )

        # GRPO: advantages relative to the group, after the seal (zero-variance groups give
        # zero advantage here; they were not dropped at admission).
        gradient = [0.0] * len(ACTIONS)
        probabilities = softmax(logits)
        with open(learner, "a", encoding="utf-8") as lines:
            for group_id in {s.group_id for s in batch}:
                group = [s for s in batch if s.group_id == group_id]
                mean = sum(s.reward for s in group) / len(group)
                spread = math.sqrt(sum((s.reward - mean) ** 2 for s in group) / len(group))
                for s in group:
                    advantage = (s.reward - mean) / (spread + 1e-6)
                    for a in range(len(ACTIONS)):  # d log softmax(a_s) / d logit_a
                        gradient[a] += advantage * ((a == s.action) - probabilities[a])
                    line = {
                        "batch_id": str(step),
                        "member_id": s.member_id,
                        "group_id": group_id,
                        "step": step,
                        "reward": s.reward,
                        "advantage": advantage,
                        "reporter": "learner",
                    }
                    lines.write(json.dumps(line) + "\n")
        scale = LEARNING_RATE / max(1, len(batch))
        logits = [x + scale * g for x, g in zip(logits, gradient, strict=True)]
        with open(completions, "a", encoding="utf-8") as done:
            done.write(json.dumps({"batch_id": str(step), "step": step, "ok": True}) + "\n")
        history.append(
            {
                "step": step,
                "epoch": decision.epoch.index,
                "decisions": decision.stats["decisions"],
                "changed": decision.stats["changed"],
                "p_correct": round(softmax(logits)[0], 3),
            }
        )

    # Afterwards: every consumed reward is its seal's, every seal read the epoch in force.
    decisions = journal.read()
    consumed = [json.loads(x) for x in learner.read_text().splitlines()]
    completed = [json.loads(x) for x in completions.read_text().splitlines()]
    report = consumption_records(decisions, consumed, completed)
    epochs = audit_epochs(decisions, registry)
    return {
        "steps": history,
        "manifest_ok": report.manifest.ok,
        "epochs_ok": epochs.ok,
        "policy": dict(zip(ACTIONS, (round(p, 3) for p in softmax(logits)), strict=True)),
    }


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="ecc-grpo-"))
    print(json.dumps(run(target), indent=2))
