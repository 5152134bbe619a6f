"""A synthetic SWE-style world: tasks, three grader versions and an executor, without sandboxes.

For the lifecycle example, tests and benchmarks: each attempt's patch states its behaviour, and
the executor writes the pytest log that behaviour would produce for the tests an eval script
names. The logs go through the real SWE-bench adapter, so every rule grades them for real.

Behaviours: ``correct`` (every test passes), ``wrong`` (FAIL_TO_PASS fails), ``skip`` (the
FAIL_TO_PASS test is skipped: 4.1 passes it), ``crash`` (no failed test, exit code 1: 4.1 passes
it), ``shallow`` (passes the original tests, fails the hardened ones), ``noapply`` (the patch
does not apply), ``infra`` (the executor stops), and the empty patch.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Final

from agent_ecc.adapters.swebench import (
    END_TEST_OUTPUT,
    START_TEST_OUTPUT,
    TEST_EXIT_CODE,
    SWEBenchAdapter,
)
from agent_ecc.execution import STRATEGY_NAMES, ExecRequest, RawOutput
from agent_ecc.grading import grade_recorded
from agent_ecc.records import Application, ExecutionRecord, RecordedScore
from agent_ecc.store import ContentStore, get_json, get_text, put_json
from agent_ecc.versions import AllOf, Entry, GraderVersion, Spec, World, iter_checks

BEHAVIOURS: Final = ("correct", "wrong", "skip", "crash", "shallow", "noapply", "infra", "empty")
WORLD: Final = "synthetic-world-0"


def synthetic_patch(task: str, behaviour: str) -> str:
    """A patch text that states ``behaviour`` (the empty patch for ``empty``)."""
    if behaviour == "empty":
        return ""
    return (
        f"diff --git a/src/{task}.py b/src/{task}.py\n--- a/src/{task}.py\n+++ b/src/{task}.py\n"
        f"@@ -1 +1 @@\n-pass\n+behaviour = {behaviour!r}\n"
    )


def _behaviour(patch: str) -> str:
    for line in patch.splitlines():
        if line.startswith("+behaviour = "):
            return line.split("=", 1)[1].strip().strip("'")
    return "empty"


def synthetic_log(behaviour: str, tests: dict[str, list[str]]) -> tuple[str, int]:
    """The log and exit code of running ``tests`` (by role) on a patch of ``behaviour``."""
    lines = []
    failed = False
    for role, names in tests.items():
        for name in names:
            status = "PASSED"
            if role == "fix" and behaviour in ("wrong", "empty"):
                status = "FAILED"
            elif role == "fix" and behaviour == "skip":
                status = "SKIPPED"
            elif role == "hardened" and behaviour in ("shallow", "wrong", "empty"):
                status = "FAILED"
            failed |= status == "FAILED"
            lines.append(f"{status} {name}")
    exit_code = 1 if failed or behaviour == "crash" else 0
    log = "\n".join(
        [
            "+ pytest -rA",
            START_TEST_OUTPUT,
            *lines,
            END_TEST_OUTPUT,
            f"{TEST_EXIT_CODE}: {exit_code}",
        ]
    )
    return log + "\n", exit_code


class SyntheticExecutor:
    """Executes requests of the synthetic world; counts how often it ran each request."""

    #: what a re-verification service reports of it: the synthetic checks' runtime, no sandbox
    runtime: Final = "git"
    network: Final = "none"

    def __init__(self, store: ContentStore) -> None:
        self.store = store
        self.runs: dict[str, int] = {}
        self._lock = threading.Lock()

    def run(self, request: ExecRequest) -> RawOutput:
        """The raw output of ``request`` (the eval script is a JSON list of tests by role)."""
        with self._lock:
            self.runs[request.request_id] = self.runs.get(request.request_id, 0) + 1
        behaviour = _behaviour(get_text(self.store, request.patch))
        tests = get_json(self.store, request.execution["eval_script"])
        return self.output(request.request_id, behaviour, tests)

    @staticmethod
    def output(request_id: str, behaviour: str, tests: dict[str, list[str]]) -> RawOutput:
        """The raw output a run of ``behaviour`` on ``tests`` gives."""
        if behaviour == "noapply":  # every strategy failed, as the real executor records it
            steps = (*(f"{name}: exit 1" for name in STRATEGY_NAMES), "git apply --check "
                     "--reverse: exit 1")  # fmt: skip
            application = Application(applied=False, attempts=STRATEGY_NAMES, steps=steps)
            return RawOutput(request_id, log=None, applied=False, application=application)
        if behaviour == "infra":
            application = Application(
                applied=False, attempts=("git apply",), executor_error="sandbox lost"
            )
            return RawOutput(
                request_id, log=None, applied=False, error="sandbox lost", application=application
            )
        log, exit_code = synthetic_log(behaviour, tests)
        return RawOutput(
            request_id,
            log=log,
            applied=True,
            exit_code=exit_code,
            application=Application(applied=True),
        )


class SyntheticWorld:
    """Tasks and the three grader versions of the lifecycle: 4.1 rules, logical, hardened."""

    def __init__(self, store: ContentStore, tasks: Sequence[str]) -> None:
        self.store = store
        self.tasks = tuple(tasks)
        self.image = put_json(store, {"synthetic": WORLD})
        self.adapter = SWEBenchAdapter(verdict="official")

    def _suite(self, task: str) -> dict[str, list[str]]:
        return {
            "FAIL_TO_PASS": [f"tests/test_{task}.py::test_fix"],
            "PASS_TO_PASS": [f"tests/test_{task}.py::test_keep"],
        }

    def _original(self, task: str, rule: str) -> Spec:
        script = put_json(
            self.store,
            {
                "fix": [f"tests/test_{task}.py::test_fix"],
                "keep": [f"tests/test_{task}.py::test_keep"],
            },
        )
        return self.adapter.check(
            f"{task}:original",
            image=self.image,
            eval_script=script,
            suite=self._suite(task),
            rule=rule,
        )

    def _hardened(self, task: str) -> Spec:
        names = [f"tests/test_{task}_hard.py::test_edge", f"tests/test_{task}.py::test_keep"]
        script = put_json(self.store, {"hardened": names[:1], "keep": names[1:]})
        exclude = put_json(self.store, [f"tests/test_{task}_hard.py"])
        return self.adapter.check(
            f"{task}:hardened",
            image=self.image,
            eval_script=script,
            suite={"reference_set": sorted(names)},
            rule="reference_set",
            patch_exclude=exclude,
        )

    def version(self, index: int) -> GraderVersion:
        """g0 (swebench_4_1), g1 (logical) or g2 (logical AND the hardened suite)."""
        entries = []
        for task in self.tasks:
            spec = self._original(task, "swebench_4_1" if index == 0 else "logical")
            if index >= 2:
                first = next(iter_checks(spec))
                spec = AllOf((first, next(iter_checks(self._hardened(task)))))
            entries.append(Entry(task=task, world=WORLD, spec=spec))
        return GraderVersion(version_id=f"g{index}", entries=tuple(entries))

    def world(self) -> World:
        """The world serving every task."""
        return World(world_id=WORLD, tasks=self.tasks)

    def produce(
        self, version: GraderVersion, task: str, attempt_id: str, behaviour: str
    ) -> tuple[ExecutionRecord, RecordedScore]:
        """What a rollout worker records for one attempt under its pinned ``version``."""
        patch = synthetic_patch(task, behaviour)
        spec = version.lookup(task, WORLD).spec
        record = self.adapter.record(
            store=self.store,
            task_id=task,
            trajectory_id=attempt_id,
            image=WORLD,
            patch=patch,
            runs=[],
        )
        runs = []
        for check in iter_checks(spec):
            request = self.adapter.request(check, record, self.store)
            out = SyntheticExecutor.output(
                request.request_id, behaviour, get_json(self.store, check.execution["eval_script"])
            )
            runs.append(self.adapter.run_from_output(check, out, self.store))
        record = self.adapter.record(
            store=self.store,
            task_id=task,
            trajectory_id=attempt_id,
            image=WORLD,
            patch=patch,
            runs=runs,
        )
        return record, grade_recorded(
            self.adapter, record, spec, self.store, grader_version=version.version_id
        )


__all__ = [
    "BEHAVIOURS",
    "WORLD",
    "SyntheticExecutor",
    "SyntheticWorld",
    "synthetic_log",
    "synthetic_patch",
]
