"""What a producer records: one execution record per attempt, and the score it got.

A member's record is the record of the attempt whose output its sample holds (E-GRADE-2). Runs
keep the raw outputs (log, run facts, the application record), never a verdict; the verdict is in
the separate :class:`RecordedScore` together with the grading identity that made it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, TypeAlias, TypeVar

import attrs

from agent_ecc.codec import from_json, to_json

Verdict: TypeAlias = Literal["pass", "fail", "undeterminable"]
T = TypeVar("T")


@attrs.frozen
class Application:
    """How the patch was applied (E-GRADE-4).

    ``applied`` false with no error set: the patch does not apply (a fail). ``executor_error`` or
    ``infra_error`` set: the executor stopped before it could tell (no verdict).
    """

    applied: bool
    attempts: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()
    reverse_check: bool | None = None
    executor_error: str | None = None
    infra_error: str | None = None

    @property
    def stopped(self) -> bool:
        """Whether the executor stopped (an infrastructure failure, not a verdict)."""
        return self.executor_error is not None or self.infra_error is not None


@attrs.frozen
class Run:
    """One execution of one check on one attempt: what ran and its raw output."""

    check_id: str
    execution: dict[str, Any]
    execution_identity: str
    log: str | None
    applied: bool
    exit_code: int | None = None
    timed_out: bool = False
    error: str | None = None
    application: Application | None = None

    @property
    def stopped(self) -> bool:
        """Whether the run failed for infrastructure reasons (an error of the run, or the
        executor stopped before it could tell whether the patch applies): no verdict of the
        patch's own."""
        return self.error is not None or (self.application is not None and self.application.stopped)

    @property
    def usable(self) -> bool:
        """Whether the output can be graded: it ran (or genuinely failed to apply) with no stop."""
        if self.stopped:
            return False
        return self.log is not None or not self.applied


@attrs.frozen
class ExecutionRecord:
    """One attempt: the task, the world it ran in, its patch (store key) and its runs."""

    record_id: str
    task_id: str
    world: str
    patch: str
    runs: tuple[Run, ...]

    def run_of(self, execution_identity: str) -> Run | None:
        """The run a check of ``execution_identity`` is graded on: the first one recorded."""
        return next((r for r in self.runs if r.execution_identity == execution_identity), None)


@attrs.frozen
class CheckVerdict:
    """The verdict one check got, with the identities that made it."""

    check_id: str
    grading_identity: str
    execution_identity: str
    verdict: Verdict


@attrs.frozen
class RecordedScore:
    """The verdict a record got under the producer's pinned grader version."""

    record_id: str
    grader_version: str
    verdict: Verdict
    checks: tuple[CheckVerdict, ...]

    @property
    def passed(self) -> bool:
        """Whether the recorded verdict is a pass."""
        return self.verdict == "pass"


def combine(verdicts: Iterable[Verdict]) -> Verdict:
    """A member's verdict from its checks': a logical fail outweighs an undeterminable one."""
    seen = set(verdicts)
    if "fail" in seen:
        return "fail"
    if "undeterminable" in seen or not seen:
        return "undeterminable"
    return "pass"


def dump_jsonl(path: str | Path, values: Iterable[Any]) -> None:
    """Append ``values`` to the JSON-lines file ``path``."""
    with open(path, "a", encoding="utf-8") as handle:
        for value in values:
            handle.write(json.dumps(to_json(value), sort_keys=True) + "\n")


def load_jsonl(path: str | Path, cls: type[T]) -> Iterator[T]:
    """The values of type ``cls`` in the JSON-lines file ``path``."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield from_json(cls, json.loads(line))
