"""The job-history routes: each trainer's jobs with their ends, metrics and mean rewards, one
job with the samples it consumed, and every finished job as chart points, which the console
draws. Read-only; the trainers write the history (:class:`reef.storage.JobHistory`).

Each job carries its number in the scenario's history (1: the first job submitted), the note
of the TRAIN instruction it answers, and whether it had a learning signal: a job every group
of which trained with one reward has advantages of 0 under a group-relative objective, a loss
of 0, and leaves the weights as they were (:meth:`reef.storage.SampleBrowser.job_signals`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from reef.server.bodies import (
    QUERY_ROOT,
    JobDetail,
    JobPage,
    JobPoint,
    JobQuery,
    JobSampleRow,
    JobSeries,
    JobSeriesQuery,
    JobSummary,
    answer,
    read_query,
)
from reef.server.errors import ApiError
from reef.server.openapi import ApiRoute
from reef.server.service import ServedScenario, check_trainer, service_of
from reef.storage.job_history import FAILED, JobEntry

__all__ = ["ROUTES"]

#: The metric a series adds of its own: the mean reward of the samples each job sent.
REWARD_MEAN: Final = "reward_mean"
#: The metric a series adds of its own: how many samples each job trained.
SAMPLES_TRAINED: Final = "samples_trained"


def _summaries(scenario: ServedScenario, entries: Sequence[JobEntry]) -> tuple[JobSummary, ...]:
    signals = scenario.browser.job_signals([(j.trainer, j.job_id) for j in entries])
    notes = scenario.browser.instruction_notes(
        sorted({j.instruction_id for j in entries if j.instruction_id is not None})
    )
    return tuple(
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
            number=job.number,
            instruction_text=None if job.instruction_id is None else notes.get(job.instruction_id),
            signal=signals.get((job.trainer, job.job_id)),
            artifact_id=job.artifact_id,
        )
        for job in entries
    )


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
            _summaries(scenario, page),
            str(page[0].seq) if len(found) > query.limit else None,
        )

    return answer(await anyio.to_thread.run_sync(read))


async def get_job(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/jobs/{trainer}/{job_id}``: one job and its samples."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    trainer = request.path_params["trainer"]
    job_id = request.path_params["job_id"]
    check_trainer(scenario, trainer, "trainer")

    def read() -> JobDetail:
        found = scenario.history.job(trainer, job_id)
        if found is None:
            raise ApiError.one(
                404, "not_found", "job_id", f"no job {job_id!r} of {trainer!r} in {scenario.name!r}"
            )
        job, consumed = found
        stored = {s.stored.id: s for s in scenario.browser.many([s.sample_id for s in consumed])}
        rows = []
        for sample in consumed:
            browsed = stored.get(sample.sample_id)
            rows.append(
                JobSampleRow(
                    sample_id=sample.sample_id,
                    sent=sample.trained,
                    reward=sample.reward,
                    group=None if browsed is None else scenario.browser.client_group(browsed),
                    group_id=None if browsed is None else browsed.stored.group_id,
                    extensions=sample.extensions,
                )
            )
        return JobDetail(scenario.name, _summaries(scenario, [job])[0], tuple(rows))

    return answer(await anyio.to_thread.run_sync(read))


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    return {
        name: float(value)
        for name, value in metrics.items()
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    }


def _points(jobs: Sequence[JobSummary], points: int) -> tuple[JobPoint, ...]:
    """The finished ``jobs`` as at most ``points`` points, each a run of consecutive jobs."""
    runs = max(1, math.ceil(len(jobs) / points))
    found = []
    for start in range(0, len(jobs), runs):
        run = jobs[start : start + runs]
        values: dict[str, list[float]] = {}
        for job in run:
            named = _numbers(job.metrics)
            if job.reward_mean is not None:
                named.setdefault(REWARD_MEAN, job.reward_mean)
            named[SAMPLES_TRAINED] = float(job.trained)
            for name, value in named.items():
                values.setdefault(name, []).append(value)
        last = run[-1]
        found.append(
            JobPoint(
                first=run[0].number,
                last=last.number,
                jobs=len(run),
                job_id=last.job_id,
                ended_at=last.ended_at,
                mean={n: sum(v) / len(v) for n, v in values.items()},
                low={n: min(v) for n, v in values.items()},
                high={n: max(v) for n, v in values.items()},
                no_signal=sum(job.signal is False for job in run),
            )
        )
    return tuple(found)


async def job_series(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/job_series``: every finished job as chart points."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    query = read_query(request, JobSeriesQuery)

    def read() -> JobSeries:
        finished = [j for j in scenario.history.read(limit=None) if j.event == "finished"]
        summaries = _summaries(scenario, finished)
        by_trainer: dict[str, list[JobSummary]] = {}
        for job in summaries:
            by_trainer.setdefault(job.trainer, []).append(job)
        series = {t: _points(jobs, query.points) for t, jobs in by_trainer.items()}
        names = {n for points in series.values() for p in points for n in p.mean}
        return JobSeries(
            scenario.name,
            series,
            {t: len(jobs) for t, jobs in by_trainer.items()},
            {t: sum(j.signal is False for j in jobs) for t, jobs in by_trainer.items()},
            tuple(sorted(names)),
        )

    return answer(await anyio.to_thread.run_sync(read))


#: The job-history routes.
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
    ApiRoute(
        "GET",
        "/reef/scenarios/{scenario}/jobs/{trainer}/{job_id:path}",
        "one job: its end, metrics, learning signal, seal, and every sample it consumed",
        get_job,
        None,
        {200: JobDetail},
        "admin",
    ),
    ApiRoute(
        "GET",
        "/reef/scenarios/{scenario}/job_series",
        "every finished job of each trainer as chart points (runs of jobs for a long history)",
        job_series,
        None,
        {200: JobSeries},
        "admin",
        query=JobSeriesQuery,
    ),
)
