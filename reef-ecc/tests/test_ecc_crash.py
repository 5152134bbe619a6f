"""Crash test: a sealing process killed with SIGKILL at random points, restarted each time.

After every restart the journal holds no half decision (a decision without its commit never
counts, a torn line is cut), its epochs never decrease and each is the one in force at the seal's
pointer read (I3, I4), no batch has two committed decisions (I5), and no batch was trained under
two decisions: every training of a batch applied its one committed decision's rewards.
"""

from __future__ import annotations

import importlib.util
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from agent_ecc import ContentStore, DirectoryRegistry, SealJournal, audit_epochs
from agent_ecc.synthetic import SyntheticWorld

WORKER = Path(__file__).parent / "fixtures" / "seal_worker.py"
BATCHES = 9
KILLS = 20


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("agent_ecc_seal_worker", WORKER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_worker = _load_worker()


def _trained(root: Path) -> list[dict[str, object]]:
    return list(_worker.trained_batches(root / "trained.jsonl"))


def _check(root: Path, registry: DirectoryRegistry) -> dict[str, int]:
    journal = SealJournal(root / "seals.jsonl")
    decisions = journal.read()
    ids = [d.batch_id for d in decisions]
    assert len(ids) == len(set(ids)), ids  # I5
    audit = audit_epochs(decisions, registry)
    assert audit.ok, audit.unexpected  # I3, I4
    by_batch = {d.batch_id: d.rewards() for d in decisions}
    for line in _trained(root):
        batch = str(line["batch_id"])
        assert batch in by_batch, f"batch {batch} trained without a committed decision"
        assert line["rewards"] == by_batch[batch], f"batch {batch} trained under another decision"
    kinds = [e["kind"] for e in journal.entries()]
    return {"committed": len(ids), "uncommitted": kinds.count("decision") - kinds.count("commit")}


@pytest.mark.slow
def test_sealing_process_killed_at_random_points(tmp_path: Path) -> None:
    """rule: E-SEAL-5, I3, I4, I5: SIGKILL during finish (between the decision's append and its
    commit) or anywhere else; after each restart the invariants hold; the run completes."""
    store = ContentStore(tmp_path / "store")
    world = SyntheticWorld(store, ("t1", "t2"))
    registry = DirectoryRegistry(tmp_path / "registry")
    registry.publish_grader(world.version(0), source="startup")
    registry.publish_world(world.world(), source="startup")
    rng = random.Random(5)
    in_finish = 0
    argv = [sys.executable, str(WORKER), str(tmp_path), str(BATCHES)]
    for _ in range(KILLS):
        worker = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        assert worker.stdout is not None
        target = rng.randint(1, 3)  # kill at the target-th finish, or just after starting
        finishing, finished_early = 0, False
        for line in worker.stdout:
            if line.startswith("finishing"):
                finishing += 1
                if finishing == target:
                    break
            if line.startswith("done"):
                finished_early = True
                break
        if finished_early:
            worker.wait(30)
            break
        time.sleep(rng.choice([0.0, 0.0, rng.uniform(0, 0.004)]))  # a random point in finish
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
        state = _check(tmp_path, registry)
        in_finish += state["uncommitted"] > 0
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip().endswith("done")
    state = _check(tmp_path, registry)
    assert state["committed"] == BATCHES
    journal = SealJournal(tmp_path / "seals.jsonl")
    assert [d.batch_id for d in journal.read()] == [f"b{b}" for b in range(BATCHES)]
    assert [d.epoch.index for d in journal.read()] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert {str(line["batch_id"]) for line in _trained(tmp_path)} == {
        f"b{b}" for b in range(BATCHES)
    }
    print(f"kills that left a decision without its commit: {in_finish}")
