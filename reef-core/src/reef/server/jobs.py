"""The job-history route: each trainer's jobs with their ends, metrics and mean rewards, which
the console draws as charts. Read-only; the trainers write the history
(:class:`reef.storage.JobHistory`)."""

from __future__ import annotations

from typing import Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from reef.server.bodies import QUERY_ROOT, JobPage, JobQuery, JobSummary, answer, read_query
from reef.server.errors import ApiError
from reef.server.openapi import ApiRoute
from reef.server.service import check_trainer, service_of
from reef.storage.job_history import FAILED

__all__ = ["ROUTES"]


async def list_jobs(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/jobs``: the latest jobs, oldest first."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    query = read_query(request, JobQuery)
    check_trainer(scenario, query.trainer, f"{QUERY_ROOT}.trainer")
    before = None
    if query.before is not None:
        if not query.before.isdigit() or len(query.before) > 18:
            raise ApiError.one(
                400,
                "invalid_request",
                f"{QUERY_ROOT}.before",
                f"expected the next of a previous page (a number), got {query.before!r}",
            )
        before = int(query.before)

    def read() -> JobPage:
        found = scenario.history.read(trainer=query.trainer, before=before, limit=query.limit + 1)
        page = found[-query.limit :]
        return JobPage(
            scenario.name,
            tuple(
                JobSummary(
                    job_id=job.job_id,
                    trainer=job.trainer,
                    submitted_at=job.submitted_at,
                    ended_at=job.ended_at,
                    event=job.event,
                    instruction_id=job.instruction_id,
                    # A failed job's weights were thrown away: it consumed, it trained none.
                    trained=0 if job.event == FAILED else job.trained,
                    sent=job.trained,
                    consumed=job.consumed,
                    reward_mean=job.reward_mean,
                    metrics=job.metrics,
                    error=job.error,
                    extensions=job.extensions,
                )
                for job in page
            ),
            str(page[0].seq) if len(found) > query.limit else None,
        )

    return answer(await anyio.to_thread.run_sync(read))


#: The job-history route.
ROUTES: Final = (
    ApiRoute(
        "GET",
        "/reef/scenarios/{scenario}/jobs",
        "the latest jobs of the scenario's trainers: ends, metrics, mean rewards",
        list_jobs,
        None,
        {200: JobPage},
        "admin",
        query=JobQuery,
    ),
)
