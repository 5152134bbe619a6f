"""OpenTelemetry spans (docs/observe.md#traces), read back from the SDK's InMemorySpanExporter:
an inference call's and a report's span under the agent's ``traceparent``, through Starlette's
TestClient against real stores and the scripted engine on loopback; a real :class:`Trainer`'s
jobs as spans of their steps, and their figures in ``GET /metrics``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("opentelemetry.sdk")
pytest.importorskip("prometheus_client")

import itertools

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from reef.components.interface import JobHandle
from reef.core.job_data import JobOutcome
from reef.server import ServerOptions
from reef.server.tracing import JobTelemetry, tracer_of
from reef.storage import Database, TrainerSamples
from reef.testing.components import RecordingComponent, grouped_parts, store_groups
from reef.testing.engines import SCRIPTED_ARTIFACT, scripted_engine
from reef.testing.service import ServiceToken, auth_section, serve_on_loopback, service_app
from reef.train.trainer import Trainer, TrainerSettings

TOKEN = ServiceToken("all", ("infer", "feedback", "admin", "metrics"))
DEPLOYMENT = (
    'storage: {url: "%(url)s"}\nserving: {engine: "%(engine)s/v1"}\n'
    + auth_section(TOKEN)
    + "scenarios:\n  support:\n    recipe: servicetest\n    training: {component: noop}\n"
)
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{AGENT_SPAN}-01"


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    with serve_on_loopback(scripted_engine()) as url:
        yield url


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def app_of(url: str, database: Database, engine: str, provider: TracerProvider) -> Any:
    options = ServerOptions(tracer_provider=provider)
    return service_app(DEPLOYMENT % {"url": url, "engine": engine}, url, database, options=options)


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


def test_inference_calls_and_reports_are_spans_of_the_agents_trace(
    storage_url: str,
    storage_database: Database,
    engine_url: str,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    headers = {**TOKEN.headers, "traceparent": TRACEPARENT}
    app = app_of(storage_url, storage_database, engine_url, provider)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "what is six times seven"}]
    with TestClient(app) as client:
        first = client.post(
            "/scenarios/support/v1/chat/completions", json={"messages": messages}, headers=headers
        )
        assert first.status_code == 200, first.text
        reply = first.json()["choices"][0]["message"]
        messages += [reply, {"role": "tool", "tool_call_id": reply["tool_calls"][0]["id"],
                             "content": "42"}]  # fmt: skip
        with client.stream(
            "POST",
            "/scenarios/support/v1/chat/completions",
            json={"messages": messages, "stream": True},
            headers=headers,
        ) as second:
            assert "[DONE]" in second.read().decode()
        report = {"id": "rep-1", "references": [second.headers["x-reef-record-id"]], "score": 1}
        posted = client.post("/reef/scenarios/support/reports", json=report, headers=headers)
        assert posted.status_code == 201, posted.text
        # A route that is neither a call nor a report has no span.
        assert client.get("/reef/status", headers=headers).status_code == 200
    calls = named(exporter, "reef.inference")
    assert len(calls) == 2
    for span in calls:
        assert span.context is not None
        assert span.parent is not None
        assert f"{span.context.trace_id:032x}" == TRACE_ID  # the agent's trace
        assert f"{span.parent.span_id:016x}" == AGENT_SPAN
        assert span.attributes is not None
        assert span.attributes["reef.scenario"] == "support"
        assert span.attributes["reef.artifact_id"] == SCRIPTED_ARTIFACT
        assert span.attributes["http.response.status_code"] == 200
    first_id, second_id = first.headers["x-reef-record-id"], second.headers["x-reef-record-id"]
    by_record = {
        str(dict(s.attributes or {})["reef.record_id"]): dict(s.attributes or {}) for s in calls
    }
    assert set(by_record) == {first_id, second_id}
    # Both calls are one trajectory, whose id is its first call's; the second continues it.
    assert by_record[first_id]["reef.trajectory_id"] == first_id
    assert by_record[second_id]["reef.trajectory_id"] == first_id
    assert by_record[second_id]["reef.trajectory.parent_id"] == first_id
    assert "reef.trajectory.parent_id" not in by_record[first_id]
    (reported,) = named(exporter, "reef.report")
    assert reported.attributes is not None
    assert reported.attributes["reef.report_id"] == "rep-1"
    assert reported.attributes["reef.record_ids"] == second_id
    assert reported.context is not None
    assert f"{reported.context.trace_id:032x}" == TRACE_ID
    assert len(exporter.get_finished_spans()) == 3


class CountingComponent(RecordingComponent):
    """Finishes each job at once, having trained 12 tokens."""

    def poll(self, handle: JobHandle) -> JobOutcome | None:
        return JobOutcome(handle.job_id, self.name, "finished", {"trained_tokens": 12})


def test_a_trainers_jobs_are_spans_of_their_steps_and_counted(
    storage_url: str,
    storage_database: Database,
    engine_url: str,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    app = app_of(storage_url, storage_database, engine_url, provider)
    service = app.state.service
    samples = TrainerSamples(storage_database, "s")
    store_groups(samples)
    component = CountingComponent()
    trainer = Trainer(
        "s",
        "c",
        database=storage_database,
        build=grouped_parts(component, job_samples=2),
        settings=TrainerSettings(poll_interval=0.05),
    )
    trainer.observer = JobTelemetry(service.metrics, tracer_of(provider))
    trainer.start()
    try:
        deadline = time.monotonic() + 30
        while not named(exporter, "reef.job") and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        trainer.stop(30)
    jobs = named(exporter, "reef.job")
    assert len(jobs) == 1
    assert [job.attributes["reef.job_id"] for job in jobs] == [  # type: ignore[index]
        data.id for data in component.submitted
    ]
    for job in jobs:
        assert job.context is not None
        assert job.start_time is not None
        assert job.end_time is not None
        assert job.attributes is not None
        assert job.attributes["reef.job.outcome"] == "finished"
        steps = [
            span
            for span in exporter.get_finished_spans()
            if span.parent is not None and span.parent.span_id == job.context.span_id
        ]
        assert [s.name for s in steps] == [
            "reef.job.reserve",
            "reef.job.submit",
            "reef.job.train",
            "reef.job.publish",
        ]
        assert job.start_time == steps[0].start_time
        assert job.end_time == steps[-1].end_time
        for earlier, later in itertools.pairwise(steps):
            assert earlier.end_time == later.start_time  # each step starts where one ended
    with TestClient(app) as client:
        text = client.get("/metrics", headers=TOKEN.headers).text
    found = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    labels = (("scenario", "s"), ("trainer", "c"))
    assert found[("reef_jobs_total", (("outcome", "finished"), *labels))] == 1
    assert found[("reef_job_duration_seconds_count", labels)] == 1
    assert found[("reef_trained_tokens_total", labels)] == 12
