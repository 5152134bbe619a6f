"""The evaluation routes: each evaluated artifact's scores and the gate's decision on it (the
console's curve of eval score per artifact), and every result with its items as JSON Lines (the
rows of ``reef export --evaluations``). For a scenario with ``evals`` (``docs/evals.md``); one
without answers 404 saying so.
"""

from __future__ import annotations

import json
from typing import Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from reef.server.bodies import (
    QUERY_ROOT,
    EvaluationCurve,
    EvaluationsExportQuery,
    EvaluationsQuery,
    answer,
    read_query,
)
from reef.server.errors import ApiError
from reef.server.export import evaluation_rows
from reef.server.openapi import ApiRoute
from reef.server.service import ServedScenario, check_trainer, service_of
from reef.storage import ArtifactEvaluations

__all__ = ["ROUTES"]


def _evaluated(scenario: ServedScenario) -> ArtifactEvaluations:
    """:raises ApiError: 404 when ``scenario`` has no eval sets."""
    if scenario.evaluations is None:
        raise ApiError.one(
            404,
            "not_found",
            "scenario",
            f"scenario {scenario.name!r} has no evals: its deployment names no evaluation set"
            " (docs/evals.md)",
        )
    return scenario.evaluations


async def evaluation_curve(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/evaluations``: each evaluated artifact's scores."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    query = read_query(request, EvaluationsQuery)
    evaluations = _evaluated(scenario)
    check_trainer(scenario, query.trainer, f"{QUERY_ROOT}.trainer")

    def read() -> EvaluationCurve:
        found, total = evaluations.artifacts(query.trainer, limit=query.limit)
        return EvaluationCurve(scenario.name, scenario.eval_sets, tuple(found), total)

    return answer(await anyio.to_thread.run_sync(read))


async def export_evaluations(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/evaluations/export``: every result, oldest first, one
    row a line with its items, streamed as it is read."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    query = read_query(request, EvaluationsExportQuery)
    _evaluated(scenario)
    check_trainer(scenario, query.trainer, f"{QUERY_ROOT}.trainer")
    rows = evaluation_rows(scenario.samples.database, scenario.name, query.trainer)
    # A sync iterator: Starlette reads it in its thread pool, a row at a time.
    lines = (json.dumps(row, sort_keys=True, allow_nan=False) + "\n" for row in rows)
    return StreamingResponse(lines, media_type="application/x-ndjson")


#: The evaluation routes.
ROUTES: Final = (
    ApiRoute(
        "GET",
        "/reef/scenarios/{scenario}/evaluations",
        "each evaluated artifact's score on each eval set and the gate's decision on it, in the"
        " order they were first evaluated",
        evaluation_curve,
        None,
        {200: EvaluationCurve},
        "admin",
        query=EvaluationsQuery,
    ),
    ApiRoute(
        "GET",
        "/reef/scenarios/{scenario}/evaluations/export",
        "every evaluation result with its items' outcomes as JSON Lines (reef export"
        " --evaluations' rows)",
        export_evaluations,
        None,
        {200: None},
        "admin",
        query=EvaluationsExportQuery,
    ),
)
