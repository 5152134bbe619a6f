"""Grading a record under a spec: what a producer stores as the verdict its attempt got."""

from __future__ import annotations

from agent_ecc.adapters import Adapter
from agent_ecc.records import CheckVerdict, ExecutionRecord, RecordedScore, combine
from agent_ecc.store import ContentStore
from agent_ecc.versions import Spec, iter_checks


def grade_recorded(
    adapter: Adapter,
    record: ExecutionRecord,
    spec: Spec,
    store: ContentStore,
    *,
    grader_version: str,
) -> RecordedScore:
    """Grade every suite of ``spec`` that ran for ``record`` (E-GRADE-1, E-GRADE-3).

    A check with no run of its execution identity, or whose run has no usable output under a
    rule that keeps infrastructure out of verdicts, is undeterminable.
    """
    verdicts = []
    for check in iter_checks(spec):
        run = record.run_of(check.execution_identity)
        verdict = "undeterminable" if run is None else adapter.grade(check, run, store)
        verdicts.append(
            CheckVerdict(
                check_id=check.check_id,
                grading_identity=check.grading_identity,
                execution_identity=check.execution_identity,
                verdict=verdict,
            )
        )
    return RecordedScore(
        record_id=record.record_id,
        grader_version=grader_version,
        verdict=combine(v.verdict for v in verdicts),
        checks=tuple(verdicts),
    )
