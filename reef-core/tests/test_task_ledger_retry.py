"""A generation retried after a failed store write (``reef.recipe.generated_tasks.ledger``).

rule: P-TASK-10 P-TASK-11 P-TASK-23 A failure to run retries the generation from its saved
candidates: a candidate that was published before the failure stays published (its own files are
not a duplicate of itself, its own name not another task's) and is trained.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from doubles.generators import ArithmeticTasks

from reef.recipe.generated_tasks.ledger import (
    Generation,
    GenerationPlan,
    TaskLedger,
    run_generation,
)
from reef.record2sample.generator import TaskGenerationRequest


class FailingOnce:
    """A key/value store in memory whose first write of a key starting with ``prefix`` fails."""

    def __init__(self, prefix: str) -> None:
        self.values: dict[str, Any] = {}
        self.prefix: str | None = prefix

    def _check(self, key: str) -> None:
        if self.prefix is not None and key.startswith(self.prefix):
            self.prefix = None
            raise OSError(f"the store lost the write of {key}")

    def get(self, key: str) -> Any | None:
        return self.values.get(key)

    def put(self, key: str, value: Any) -> None:
        self._check(key)
        self.values[key] = value

    def put_new(self, key: str, value: Any) -> bool:
        self._check(key)
        return self.values.setdefault(key, value) is value

    def delete(self, key: str) -> bool:
        return self.values.pop(key, None) is not None

    def items(self) -> Iterator[tuple[str, Any]]:
        return iter(list(self.values.items()))


@pytest.mark.parametrize("failing", ["task:", "decision:"])
def test_a_retry_keeps_a_candidate_published_before_the_failure(failing: str) -> None:
    """rule: P-TASK-10 P-TASK-11 -- the write after the digest (``task:``) or after the task
    (``decision:``) fails once; the retry publishes the candidates, none rejected."""
    store = FailingOnce(failing)
    ledger = TaskLedger(store)
    generation = Generation(1, TaskGenerationRequest(1, "sums", ()))
    plan = GenerationPlan(ArithmeticTasks(tasks_per_generation=2), 2, 60.0, 0.0)
    outcome = asyncio.run(run_generation(ledger, generation, plan))
    assert len(outcome.train) == 2
    assert ledger.rejected == 0
    assert all("published" in v for k, v in store.values.items() if k.startswith("decision:"))
    assert sorted(ledger.published) == sorted(t.name for t in outcome.train)
