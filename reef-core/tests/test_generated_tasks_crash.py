"""Generated tasks survive SIGKILL: a real trainer process is killed at the worst moments.

rule: P-TASK-16 P-TASK-24 P-TASK-5 P-TASK-10 P-TASK-15

Each run is a child process that runs the real :class:`~reef.train.trainer.Trainer` of the
generated-task recipe on one SQLite store, with a scripted generator and a stand-in training
component (below) that keeps each job in a file and reports each task's rewards when polled. A
run kills itself with SIGKILL at one chosen moment, the next run takes over (the lease of the
dead one expires), and a last run goes on until every generation's results went out. The
moments:

- during a generation: inside ``generate`` (before any candidate is saved), and inside
  ``validate`` (after the candidates were saved);
- during a task job: the first time the trainer polls a job (submitted and committed, not
  ended);
- after a job's end, once the trainer committed it and before the stage saved its results.

Then, read from the store and the generator's log: every generation up to the last ran and
completed once, none was lost nor made twice (a generation killed after its candidates were
saved is not generated again); every train task trained exactly once and has exactly one
result, a rolled-out one; and ``record_results`` was called exactly once per generation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from doubles.generators import ArithmeticTasks

from reef.components.interface import Artifact, JobHandle
from reef.core.harbor import HarborTask
from reef.core.job_data import JobData, JobOutcome, TaskSample
from reef.pipeline_context import PipelineContext
from reef.recipe.generated_tasks import RolledOutTask, TaskValidationResult, result_from_json
from reef.recipe.generated_tasks.processor import GeneratedTaskJobData, GeneratedTaskSamples
from reef.record2sample.generator import TaskGenerationRequest
from reef.storage import Database, TaskStorage, TrainerSamples, open_database
from reef.train.pipeline import TrainingPipeline
from reef.train.trainer import Trainer, TrainerParts, TrainerSettings

ROUNDS = 4
TASKS = 2
#: The rewards the stand-in component reports for every task.
REWARDS = [1.0, 0.0]

#: The runs: where each kills itself (the event and on which of its calls), and the last run.
KILLS: tuple[tuple[str, int] | None, ...] = (
    ("generate", 1),  # generation 1, before its candidates are saved
    ("job_ended", 1),  # the first job's end: committed, results not saved
    ("validate", 1),  # generation 2 (or its successor): candidates saved
    ("poll", 1),  # a task job that is running
    ("job_ended", 2),
    None,
)

CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from test_generated_tasks_crash import drive
drive(sys.argv[2], sys.argv[3], sys.argv[4])
"""


def _die_at(event: str, kill: tuple[str, int] | None, seen: Counter[str]) -> None:
    seen[event] += 1
    if kill is not None and kill == (event, seen[event]):
        os.kill(os.getpid(), signal.SIGKILL)


class StandInComponent:
    """A stand-in for a training component that runs task jobs: it trains nothing, keeps each
    submitted job in a file of ``folder`` (so a job survives its process), and reports a job
    ended, with ``rollout_rewards`` for each task, when polled; a job it has no file of (lost)
    ended failed. It implements only the component contract's methods the trainer calls."""

    name = "c"

    def __init__(self, folder: Path, kill: tuple[str, int] | None, seen: Counter[str]) -> None:
        self.folder = folder
        self.kill = kill
        self.seen = seen

    def submit(self, data: JobData, parameters: Mapping[str, Any] | None = None) -> JobHandle:
        names = [s.name for s in data.samples if isinstance(s, TaskSample)]
        path = self.folder / f"job-{data.id.replace(':', '_')}.json"
        path.write_text(json.dumps(names), encoding="utf-8")
        return JobHandle(data.id, self.name)

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        _die_at("poll", self.kill, self.seen)
        path = self.folder / f"job-{handle.job_id.replace(':', '_')}.json"
        if not path.exists():
            return JobOutcome(handle.job_id, self.name, "failed", error="the job was lost")
        names = json.loads(path.read_text(encoding="utf-8"))
        rewards = dict.fromkeys(names, REWARDS)
        return JobOutcome(handle.job_id, self.name, "finished", {"rollout_rewards": rewards})

    def wait(self, handle: JobHandle, timeout: float | None = None) -> JobOutcome:
        outcome = self.poll(handle)
        assert outcome is not None
        return outcome

    def publish(self) -> Artifact:
        return Artifact("art-0", self.folder)

    def close(self) -> None:
        pass


def drive(url: str, folder_name: str, kill_name: str) -> None:
    """One run: train until every generation went out, or die at ``kill_name``."""
    folder = Path(folder_name)
    kill: tuple[str, int] | None = None
    if kill_name != "none":
        event, _, count = kill_name.partition(":")
        kill = (event, int(count))
    seen: Counter[str] = Counter()
    log = folder / "results.jsonl"
    calls = folder / "generate-calls.txt"

    class Dying(ArithmeticTasks):
        async def generate(self, request: TaskGenerationRequest) -> tuple[HarborTask, ...]:
            with calls.open("a", encoding="utf-8") as out:
                out.write(f"{request.generation}\n")
            _die_at("generate", kill, seen)
            return await super().generate(request)

        async def validate(self, task: HarborTask) -> TaskValidationResult:
            _die_at("validate", kill, seen)
            return await super().validate(task)

    class DyingSamples(GeneratedTaskSamples):
        def job_ended(self, outcome: JobOutcome) -> None:
            _die_at("job_ended", kill, seen)
            super().job_ended(outcome)

    database = open_database(url)

    def build(fenced: Database) -> TrainerParts:
        context = PipelineContext("s", "c", task_storage=TaskStorage(fenced, "s"))
        generator = Dying(tasks_per_generation=TASKS, results_log=str(log))
        stage = DyingSamples(context, generator, rounds=ROUNDS, refill_tasks=1)
        jobs = GeneratedTaskJobData(context, record2sample=stage, buffer_size=1)
        pipeline = TrainingPipeline(
            stage, jobs, samples=TrainerSamples(fenced, "s"), context=context,
            replay_last_outcome=False,
        )  # fmt: skip
        return TrainerParts(pipeline, StandInComponent(folder, kill, seen))  # type: ignore[arg-type]

    trainer = Trainer(
        "s",
        "c",
        database=database,
        build=build,
        settings=TrainerSettings(poll_interval=0.02, lease_ttl=1.0),
    )
    trainer.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        delivered = _delivered(log)
        if sorted(delivered) == list(range(1, ROUNDS + 1)):
            break
        time.sleep(0.05)
    trainer.stop(30)
    database.dispose()


def _delivered(log: Path) -> list[int]:
    if not log.exists():
        return []
    return [json.loads(line)["generation"] for line in log.read_text().splitlines() if line]


def test_sigkill_loses_no_generation_and_no_result(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/reef.db"
    open_database(url).dispose()  # migrated once, before the runs
    for kill in KILLS:
        name = "none" if kill is None else f"{kill[0]}:{kill[1]}"
        run = subprocess.run(
            [sys.executable, "-c", CHILD, str(Path(__file__).parent), url, str(tmp_path), name],
            capture_output=True,
            text=True,
            timeout=300,
        )
        expected = 0 if kill is None else -signal.SIGKILL
        assert run.returncode == expected, f"run {name}: {run.returncode}\n{run.stderr[-3000:]}"

    # record_results: exactly once per generation, every generation.
    assert sorted(_delivered(tmp_path / "results.jsonl")) == list(range(1, ROUNDS + 1))
    # No generation generated again once its candidates were saved: only the run killed
    # inside generate asked twice for the same generation.
    asked = Counter(int(n) for n in (tmp_path / "generate-calls.txt").read_text().split())
    assert asked == Counter({1: 2, **dict.fromkeys(range(2, ROUNDS + 1), 1)})

    database = open_database(url)
    try:
        store = TaskStorage(database, "s").open("generated-tasks")
        entries = dict(store.items())
        generations = sorted(int(k.split(":")[1]) for k in entries if k.startswith("generation:"))
        assert generations == list(range(1, ROUNDS + 1))
        assert all(entries[f"generation:{n}"]["complete"] for n in generations)
        train = [name for n in generations for name in entries[f"generation:{n}"]["train"]]
        assert len(train) == len(set(train)) == ROUNDS * TASKS
        results = {k.split(":", 1)[1]: result_from_json(v) for k, v in entries.items()
                   if k.startswith("result:")}  # fmt: skip
        assert sorted(results) == sorted(train)
        assert all(
            isinstance(r, RolledOutTask) and list(r.rollout_rewards) == REWARDS
            for r in results.values()
        )
        # Every train task trained exactly once.
        samples = TrainerSamples(database, "s")
        counts = samples.train_counts("c", [f"generated-tasks/{name}" for name in train])
        assert set(counts.values()) == {1}
        assert len(counts) == len(train)
    finally:
        database.dispose()
    # Each generation's results, as the generator got them: one per train task.
    for line in (tmp_path / "results.jsonl").read_text().splitlines():
        got = json.loads(line)
        assert len(got["results"]) == TASKS
        assert {r["case"] for r in got["results"]} == {"rolled_out"}
