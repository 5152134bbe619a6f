"""Evaluations of each artifact and the eval gate: the eval sets read and scored
(:mod:`reef.evals.sets`), an artifact reached under a name the agents do not see
(:mod:`reef.evals.targets`), and the component wrapper that evaluates each new artifact and lets
the engine serve it only when the gate passes it (:mod:`reef.evals.gate`).

What a tracker or a console reads: :func:`evaluation_results`, each a
:class:`reef.core.evals.EvalResult`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reef.core.evals import EvalResult
    from reef.storage import Database

__all__ = ["evaluation_results"]


def evaluation_results(
    database: Database, scenario: str, trainer: str | None = None, *, limit: int = 100
) -> list[EvalResult]:
    """The newest ``limit`` evaluation results of ``scenario`` (of ``trainer``, else of every
    trainer), oldest first."""
    from reef.storage import ArtifactEvaluations  # the package stays light for reef check

    return ArtifactEvaluations(database, scenario).results(trainer, limit=limit)
