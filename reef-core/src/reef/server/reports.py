"""The report route: a client scores the calls it made.

A report's own content is checked here (:func:`admissible_report`); whether its references
exist, are inference records of its scenario and end their trajectories is the ledger's to
check against the store, in the transaction that stores it
(:meth:`reef.server.ledger.ScenarioLedger.admit`). A retry of an admitted report gets the same
receipt.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from starlette.requests import Request
from starlette.responses import Response

from reef.core.records import Report, has_eligibility_flag
from reef.server.bodies import ReportBody, ReportReceipt, answer, structure
from reef.server.errors import ReportRejected
from reef.server.openapi import ApiRoute
from reef.server.request_json import read_json
from reef.server.service import service_of
from reef.server.tracing import note

__all__ = ["ROUTES", "admissible_report"]


async def post_report(request: Request) -> Response:
    """``POST /reef/scenarios/{scenario}/reports``: 201 for a new report, 200 for a retry."""
    service = service_of(request)
    _, scenario = service.authorised(request, "feedback")
    body = structure(await read_json(request, service.options.max_body_bytes), ReportBody)
    report = admissible_report(scenario.name, body)
    receipt, new = await asyncio.wrap_future(service.ledger(scenario).admit(report))
    note(
        {"reef.scenario": scenario.name, "reef.report_id": report.id,
         "reef.record_ids": ",".join(report.references)}
    )  # fmt: skip
    return answer(receipt, 201 if new else 200)


def admissible_report(scenario: str, body: ReportBody) -> Report:
    """The report of ``body`` if its own content is admissible (P-REP-1, P-REP-3): no duplicate
    reference, no ``metadata.training.eligible``, a finite score. The references' existence
    and places are the ledger's to check, against the store.

    :raises ReportRejected: naming the field and the reason.
    """
    if has_eligibility_flag(body.metadata):
        raise ReportRejected(
            "eligibility",
            "$.metadata.training.eligible",
            "a report cannot opt in or out of training: remove metadata.training.eligible",
        )
    if not body.references:
        raise ReportRejected("schema", "$.references", "a report references at least one call")
    seen: dict[str, int] = {}
    for position, reference in enumerate(body.references):
        if reference in seen:
            raise ReportRejected(
                "duplicate",
                f"$.references[{position}]",
                f"{reference!r} is referenced twice (also at $.references[{seen[reference]}])",
            )
        seen[reference] = position
    try:
        return Report(
            id=body.id,
            scenario=scenario,
            references=body.references,
            score=body.score,
            feedback=body.feedback,
            metadata=body.metadata,
            created_at=time.time(),
        )
    except ValueError as exc:
        raise ReportRejected("schema", "$.score", str(exc)) from None


#: The report route.
ROUTES: Final = (
    ApiRoute(
        "POST",
        "/reef/scenarios/{scenario}/reports",
        "admit a report (201 new, 200 identical retry)",
        post_report,
        ReportBody,
        {201: ReportReceipt, 200: ReportReceipt},
        "feedback",
    ),
)
