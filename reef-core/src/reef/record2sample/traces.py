"""Harness evolution's record-to-sample stage: :class:`TraceSamples`.

Harness evolution improves what surrounds a model (its prompts, tools and scaffolding) instead
of its weights: a proposer reads the agent's traces, and what a client asks for in its TRAIN
instruction, and proposes a better harness. The traces are the scenario's reported sessions: each
report becomes one trajectory sample of its calls, with the report's score and feedback.

Every report is a trace, whatever its score: a successful session shows the proposer what to
keep as much as a failed one shows what to change, so the stage has no ``max_score`` and filters
no report by its score (P-LAYOUT-6).
"""

from __future__ import annotations

from reef.record2sample.reports import ReportSamples

__all__ = ["TraceSamples"]


class TraceSamples(ReportSamples):
    """Each report, scored or not, successful or not, is one trace: a trajectory sample of its
    calls (P-LAYOUT-6). It takes the settings every record-to-sample stage takes
    (``max_staleness``) and nothing that filters reports."""
