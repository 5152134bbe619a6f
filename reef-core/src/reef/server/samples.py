"""The sample routes: a scenario's samples a page at a time, one sample with where it came
from and the jobs that consumed it, and a person's reward for a sample (a label, kept with who
gave it and when). For people (the console, ``docs/console.md``); what trains is chosen through
the manual buffer's routes (:mod:`reef.server.scenarios`).
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
    ArtifactRewards,
    ArtifactRewardsQuery,
    RecordSource,
    Relabel,
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
    structure,
    tag_condition,
)
from reef.server.errors import ApiError
from reef.server.openapi import ApiRoute
from reef.server.request_json import read_json
from reef.server.service import ServedScenario, Service, check_trainer, service_of
from reef.storage import (
    BrowsedSample,
    BrowseKey,
    Position,
    RecordStore,
    SampleBrowser,
    SampleFilter,
    SampleLabel,
)
from reef.storage.job_history import FAILED

__all__ = ["ROUTES"]

#: How much of a sample's first user message its summary shows.
PREVIEW_CHARS: Final = 160

_KEY: Final = re.compile(r"([0-9]{1,18})\.([0-9]{1,18})(?:~(none|-?[0-9.e+-]{1,32}))?")


def _key(cursor: str | None, name: str, by_reward: bool) -> BrowseKey | None:
    """A page's cursor read back: ``<position>`` in time order, ``<position>~<reward>`` (or
    ``~none``) in reward order."""
    if cursor is None:
        return None
    found = _KEY.fullmatch(cursor)
    reward: float | None = None
    if found is not None and by_reward and found[3] not in (None, "none"):
        try:
            reward = float(found[3])
        except ValueError:
            found = None
    if found is None or by_reward != (found[3] is not None):
        example = "'0.42~0.5'" if by_reward else "'0.42'"
        raise ApiError.one(
            400,
            "invalid_request",
            f"{QUERY_ROOT}.{name}",
            f"expected the cursor of a page of this order (such as {example}), got {cursor!r}",
        )
    return BrowseKey(Position(int(found[1]), int(found[2])), reward)


def _cursor(summary: SampleSummary, by_reward: bool) -> str:
    if not by_reward:
        return summary.position
    return f"{summary.position}~{'none' if summary.reward is None else repr(summary.reward)}"


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


def _summary(browsed: BrowsedSample, labels: Mapping[str, float]) -> SampleSummary:
    stored = browsed.stored
    try:
        reward = sample_reward(sample_from_body(stored.kind, stored.body))
    except SampleFormatError:
        reward = None  # a body the pipeline refuses too; shown as it is
    steps, preview = _preview(stored.kind, stored.body)
    report_id = stored.body.get("report_id")
    return SampleSummary(
        group=SampleBrowser.client_group(browsed),
        no_signal_by=dict(browsed.no_signal_counts),
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
        label=labels.get(stored.id),
    )


async def list_samples(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/samples``: a page of the scenario's samples."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    query = read_query(request, SampleQuery)
    check_trainer(scenario, query.trainer, f"{QUERY_ROOT}.trainer")
    by_reward = query.sort == "reward"
    after = _key(query.after, "after", by_reward)
    before = _key(query.before, "before", by_reward)
    given = [name for name, value in (("after", after), ("before", before)) if value is not None]
    if query.last:
        given.append("last")
    if len(given) > 1:
        raise ApiError.one(
            400,
            "invalid_request",
            f"{QUERY_ROOT}.{given[1]}",
            f"give one of after, before and last, not {' and '.join(given)}",
        )
    where = SampleFilter(
        kind=query.kind,
        trained=query.trained,
        stale=query.stale,
        trainer=query.trainer,
        chosen=query.chosen,
        group=query.group,
        text=query.text,
        reward_min=query.reward_min,
        reward_max=query.reward_max,
        artifact=query.artifact,
        since=query.since,
        until=query.until,
        tags=tag_condition(query.tag),
    )

    def read() -> SamplePage:
        # One more than the page: whether a page lies beyond it, without a second query.
        found = scenario.browser.page(
            where,
            after=after,
            before=before,
            from_end=query.last,
            limit=query.limit + 1,
            newest_first=query.order == "desc",
            by_reward=by_reward,
        )
        backwards = before is not None or query.last
        more = len(found) > query.limit
        shown = found[1:] if backwards and more else found[: query.limit]
        labels = scenario.labels.in_force([s.stored.id for s in shown])
        page = [_summary(s, labels) for s in shown]
        # Walking forward, a page lies before this one when it was reached from one; walking
        # back, one lies after it likewise.
        earlier = more if backwards else after is not None
        later = before is not None if backwards else more
        total, exact = scenario.browser.count(where) if query.count else (None, True)
        return SamplePage(
            scenario.name,
            tuple(page),
            total,
            _cursor(page[-1], by_reward) if page and later else None,
            _cursor(page[0], by_reward) if page and earlier else None,
            exact,
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
    signals = scenario.browser.group_signals(stored.id)
    entries = scenario.history.of_sample(stored.id)
    labels = scenario.labels.history(stored.id)
    in_force = labels[-1].reward if labels else None
    return SampleDetail(
        scenario=scenario.name,
        sample=_summary(browsed, {} if in_force is None else {stored.id: in_force}),
        labels=tuple(labels),
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
                signal=signals.get((entry.job.trainer, entry.job.job_id)),
                number=entry.job.number,
            )
            for entry in entries
        ),
    )


async def get_sample(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/samples/{sample_id}``: one sample and its sources."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    sample_id = request.path_params["sample_id"]
    return answer(await anyio.to_thread.run_sync(_detail, service, scenario, sample_id))


def _relabel(scenario: ServedScenario, asked: Relabel, labelled_by: str) -> SampleLabel:
    browsed = scenario.browser.one(asked.sample_id)
    if browsed is None:
        raise ApiError.one(
            400,
            "invalid_request",
            "$.sample_id",
            f"no sample {asked.sample_id!r} is stored in scenario {scenario.name!r}",
        )
    stored = browsed.stored
    if stored.kind != "trajectory":
        raise ApiError.one(
            400,
            "invalid_request",
            "$.sample_id",
            f"sample {stored.id!r} is a {stored.kind} sample: it has no reward to relabel"
            " (its rollouts are scored by its verifier)",
        )
    in_force = scenario.labels.in_force([stored.id])
    if asked.reward is None and stored.id not in in_force:
        raise ApiError.one(
            400,
            "invalid_request",
            "$.reward",
            f"sample {stored.id!r} has no label in force to take back",
        )
    try:
        own = sample_reward(sample_from_body(stored.kind, stored.body))
    except SampleFormatError:
        own = None
    return scenario.labels.label(
        stored.id,
        asked.reward,
        previous_reward=in_force.get(stored.id, own),
        labelled_by=labelled_by,
        note=asked.note,
    )


async def relabel(request: Request) -> Response:
    """``POST /reef/scenarios/{scenario}/labels``: a person's reward for a sample, in force
    from the next job that takes the sample."""
    service = service_of(request)
    caller, scenario = service.authorised(request, "admin")
    asked = structure(await read_json(request, service.options.max_body_bytes), Relabel)
    # Without auth only loopback clients are served: they are named so.
    who = caller.name if caller.name is not None else "a loopback client (no auth)"
    return answer(await anyio.to_thread.run_sync(_relabel, scenario, asked, who))


async def artifact_rewards(request: Request) -> Response:
    """``GET /reef/scenarios/{scenario}/artifact_rewards``: each artifact's mean reward."""
    service = service_of(request)
    _, scenario = service.authorised(request, "admin")
    query = read_query(request, ArtifactRewardsQuery)

    def read() -> ArtifactRewards:
        found, total = scenario.browser.artifact_rewards(limit=query.limit)
        return ArtifactRewards(scenario.name, tuple(found), total)

    return answer(await anyio.to_thread.run_sync(read))


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
    ApiRoute(
        "POST",
        "/reef/scenarios/{scenario}/labels",
        "a person's reward for a trajectory sample, in force from its next job (null: take back)",
        relabel,
        Relabel,
        {200: SampleLabel},
        "admin",
    ),
    ApiRoute(
        "GET",
        "/reef/scenarios/{scenario}/artifact_rewards",
        "each artifact's mean reward over the samples it answered, in the order it first answered",
        artifact_rewards,
        None,
        {200: ArtifactRewards},
        "admin",
        query=ArtifactRewardsQuery,
    ),
)
