"""The sample routes: a scenario's samples a page at a time, and one sample with where it came
from and the jobs that consumed it. Read-only, for people (the console, ``docs/console.md``);
what trains is chosen through the manual buffer's routes (:mod:`reef.server.scenarios`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import anyio.to_thread
from starlette.requests import Request
from starlette.responses import Response

from reef.core.job_data import SampleFormatError, sample_from_body, sample_reward
from reef.core.records import InferenceRecord, Report
from reef.server.bodies import (
    QUERY_ROOT,
    RecordSource,
    ReportSource,
    SampleDetail,
    SampleInJob,
    SamplePage,
    SampleQuery,
    SampleSummary,
    TaskSource,
    UploadSource,
    answer,
    read_query,
)
from reef.server.errors import ApiError
from reef.server.openapi import ApiRoute
from reef.server.service import ServedScenario, Service, check_trainer, service_of
from reef.storage import BrowsedSample, Position, RecordStore, SampleFilter
from reef.storage.job_history import FAILED

__all__ = ["ROUTES"]

#: How much of a sample's first user message its summary shows.
PREVIEW_CHARS: Final = 160

_POSITION: Final = re.compile(r"([0-9]{1,18})\.([0-9]{1,18})")


def _position(cursor: str | None) -> Position | None:
    if cursor is None:
        return None
    found = _POSITION.fullmatch(cursor)
    if found is None:
        raise ApiError.one(
            400,
            "invalid_request",
            f"{QUERY_ROOT}.after",
            f"expected the next of a previous page (such as '0.42'), got {cursor!r}",
        )
    return Position(int(found[1]), int(found[2]))


def _text(content: Any) -> str:
    """The text of an ATIF message: a string, or the text parts of a list of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            str(part.get("text"))
            for part in content
            if isinstance(part, Mapping) and part.get("text") is not None
        )
    return ""


def _preview(kind: str, body: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """How many steps the sample's trajectory has, and the start of its first user message
    (a task: its name)."""
    if kind == "task":
        name = body.get("name")
        return None, name if isinstance(name, str) else None
    trajectory = body.get("trajectory")
    steps = trajectory.get("steps") if isinstance(trajectory, Mapping) else None
    if not isinstance(steps, list):
        return None, None
    first = next(
        (s for s in steps if isinstance(s, Mapping) and s.get("source") == "user"),
        steps[0] if steps else None,
    )
    text = " ".join(_text(first.get("message")).split()) if isinstance(first, Mapping) else ""
    if len(text) > PREVIEW_CHARS:
        text = text[: PREVIEW_CHARS - 1] + "…"
    return len(steps), text or None


def _summary(browsed: BrowsedSample) -> SampleSummary:
    stored = browsed.stored
    try:
        reward = sample_reward(sample_from_body(stored.kind, stored.body))
    except SampleFormatError:
        reward = None  # a body the pipeline refuses too; shown as it is
    steps, preview = _preview(stored.kind, stored.body)
    report_id = stored.body.get("report_id")
    return SampleSummary(
        id=stored.id,
        kind=stored.kind,
        group_id=stored.group_id,
        position=str(stored.position),
        made_by=stored.trainer,
        origin=stored.origin,
        reward=reward,
        report_id=report_id if isinstance(report_id, str) else None,
        steps=steps,
        preview=preview,
        trained_by=dict(browsed.train_counts),
        manual_buffer=browsed.manual_buffers,
        stale_for=browsed.stale_for,
        failed_by=dict(browsed.failed_counts),
    )


async def list_samples(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/samples``: a page of the scenario's samples."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    query = read_query(request, SampleQuery)
    check_trainer(scenario, query.trainer, f"{QUERY_ROOT}.trainer")
    after = _position(query.after)
    where = SampleFilter(
        query.kind, query.group, query.trained, query.stale, query.trainer, query.chosen
    )

    def read() -> SamplePage:
        # One more than the page: whether a next page exists, without a second query.
        found, total = scenario.browser.page(
            where, after=after, limit=query.limit + 1, newest_first=query.order == "desc"
        )
        page = found[: query.limit]
        more = len(found) > query.limit
        return SamplePage(
            scenario.name,
            tuple(_summary(s) for s in page),
            total,
            str(page[-1].stored.position) if more else None,
        )

    return answer(await anyio.to_thread.run_sync(read))


def _record_source(records: RecordStore, record_id: str) -> RecordSource:
    stored = records.get(record_id)
    if stored is None:
        return RecordSource(record_id, None, stored=False, held=False)
    record = stored.record
    artifact, at = None, None
    if isinstance(record, InferenceRecord):
        artifact, at = record.artifact_id, record.ended_at
    elif isinstance(record, Report):
        at = record.created_at
    return RecordSource(
        record_id,
        stored.kind,
        stored=True,
        held=record is not None,
        evicted_reason=stored.evicted_reason,
        artifact_id=artifact,
        at=at,
    )


def _report_source(records: RecordStore, report_id: str) -> ReportSource:
    stored = records.get(report_id)
    report = None if stored is None else stored.record
    if not isinstance(report, Report):
        return ReportSource(report_id, held=False)
    return ReportSource(
        report_id,
        held=True,
        score=report.score,
        feedback=report.feedback,
        metadata=dict(report.metadata),
        references=report.references,
    )


def _detail(service: Service, scenario: ServedScenario, sample_id: str) -> SampleDetail:
    browsed = scenario.browser.one(sample_id)
    if browsed is None:
        raise ApiError.one(
            404, "not_found", "sample_id", f"no sample {sample_id!r} in {scenario.name!r}"
        )
    stored = browsed.stored
    body = stored.body
    sources = body.get("source_record_ids")
    report_id = body.get("report_id")
    name = body.get("name")
    split = body.get("split")
    return SampleDetail(
        scenario=scenario.name,
        sample=_summary(browsed),
        body=body,
        records=tuple(
            _record_source(scenario.records, str(r))
            for r in (sources if isinstance(sources, list) else [])
        ),
        report=_report_source(scenario.records, report_id) if isinstance(report_id, str) else None,
        upload=UploadSource(stored.id, service.items.get(stored.id) is not None)
        if stored.origin == "upload"
        else None,
        task=TaskSource(name, split if isinstance(split, str) else None)
        if stored.kind == "task" and isinstance(name, str)
        else None,
        jobs=tuple(
            SampleInJob(
                job_id=entry.job.job_id,
                trainer=entry.job.trainer,
                trained=entry.sample.trained and entry.job.event != FAILED,
                sent=entry.sample.trained,
                reward=entry.sample.reward,
                event=entry.job.event,
                submitted_at=entry.job.submitted_at,
                ended_at=entry.job.ended_at,
                extensions=entry.sample.extensions,
                job_extensions=entry.job.extensions,
            )
            for entry in scenario.history.of_sample(stored.id)
        ),
    )


async def get_sample(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/samples/{sample_id}``: one sample and its sources."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    sample_id = request.path_params["sample_id"]
    return answer(await anyio.to_thread.run_sync(_detail, service, scenario, sample_id))


#: The sample routes.
ROUTES: Final = (
    ApiRoute(
        "GET",
        "/reef/scenarios/{scenario}/samples",
        "the scenario's samples, a page at a time, filtered",
        list_samples,
        None,
        {200: SamplePage},
        "admin",
        query=SampleQuery,
    ),
    ApiRoute(
        "GET",
        "/reef/scenarios/{scenario}/samples/{sample_id:path}",
        "one sample: its trajectory or task, reward, sources and the jobs that consumed it",
        get_sample,
        None,
        {200: SampleDetail},
        "admin",
    ),
)
