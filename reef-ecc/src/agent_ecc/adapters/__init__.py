"""Adapters: what knows how a benchmark's checks run and grade.

The scorer, the seal and the replay are benchmark-agnostic; they reach a benchmark only through
an :class:`Adapter`: the identity of what grades a check, the grading of one run's raw output,
the request that re-executes a check, and the verdicts a record decides without any log.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # named in annotations only: importing an adapter imports no more than it
    from agent_ecc.execution import ExecRequest, RawOutput
    from agent_ecc.records import ExecutionRecord, Run, Verdict
    from agent_ecc.store import ContentStore
    from agent_ecc.versions import Check


class Adapter(Protocol):
    """The benchmark-specific half of grading (contract sections 1 to 4)."""

    @property
    def name(self) -> str:
        """The adapter's name, as checks name it."""
        ...

    def grading_identity(self, check: Check) -> str:
        """The identity of what grades ``check`` (its rule, parser and suite)."""
        ...

    def grade(self, check: Check, run: Run, store: ContentStore) -> Verdict:
        """The verdict of ``check``'s rule on one run's raw output."""
        ...

    def evidence(
        self, check: Check, record: ExecutionRecord, store: ContentStore
    ) -> Verdict | None:
        """A verdict ``record`` decides for ``check`` without any log, or None."""
        ...

    def request(self, check: Check, record: ExecutionRecord, store: ContentStore) -> ExecRequest:
        """The request that executes ``check`` on ``record``'s patch."""
        ...

    def run_from_output(self, check: Check, output: RawOutput, store: ContentStore) -> Run:
        """A run of ``check`` from a backend's raw output."""
        ...
