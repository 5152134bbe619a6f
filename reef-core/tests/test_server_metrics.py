"""``GET /metrics`` after real calls through Starlette's TestClient, against real stores (SQLite,
and PostgreSQL when configured) and the scripted engine on loopback: each figure read back with
prometheus_client's own text parser (docs/observe.md)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")

import httpx
from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from reef.server import ServerOptions
from reef.server.metrics import METRIC_NAMES
from reef.server.service_runtime import ServiceRuntime
from reef.storage import Database, DropCounters, ScenarioSettings, TrainerLeases
from reef.storage.scenario_settings import snapshot_key
from reef.testing.engines import scripted_engine
from reef.testing.service import ServiceToken, auth_section, serve_on_loopback, service_app

TOKENS = (
    ServiceToken("admin", ("infer", "feedback", "admin")),
    ServiceToken("scraper", ("metrics",)),
    ServiceToken("limited", ("metrics",), ("support",)),
)
ADMIN, SCRAPER, LIMITED = (token.headers for token in TOKENS)

DEPLOYMENT = (
    'storage: {url: "%(url)s"}\nserving: {engine: "%(engine)s/v1"}\n'
    + auth_section(*TOKENS)
    + """scenarios:
  support:
    recipe: servicetest
    training: {component: noop}
"""
)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    with serve_on_loopback(scripted_engine()) as url:
        yield url


class Process(ServiceRuntime):
    """A runtime of a named process (the label of the store's figures)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def process(self) -> str:
        return self.name


def app_of(url: str, database: Database, engine: str, process: str = "proc-a") -> Any:
    return service_app(
        DEPLOYMENT % {"url": url, "engine": engine}, url, database, runtime=Process(process)
    )


@pytest.fixture
def client(storage_url: str, storage_database: Database, engine_url: str) -> Iterator[TestClient]:
    with TestClient(app_of(storage_url, storage_database, engine_url)) as test_client:
        yield test_client


def scrape(client: TestClient | httpx.Client) -> Samples:
    """Every sample of ``GET /metrics``, by name and labels, as Prometheus' parser reads it."""
    answer = client.get("/metrics", headers=SCRAPER)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def chat(client: TestClient, content: str, **extra: Any) -> Any:
    return client.post(
        "/scenarios/support/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": content}], **extra},
        headers=ADMIN,
    )


def test_requests_are_counted_by_route_scenario_format_and_status(client: TestClient) -> None:
    assert chat(client, "hello").status_code == 200
    assert chat(client, "again").status_code == 200
    responses = client.post(
        "/v1/responses",
        json={"model": "m", "input": "hi"},
        headers={**ADMIN, "x-reef-scenario": "support"},
    )
    assert responses.status_code == 200, responses.text
    messages = client.post(
        "/scenarios/support/v1/messages",
        json={"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]},
        headers=ADMIN,
    )
    assert messages.status_code == 200, messages.text
    # A scenario the deployment does not have: refused, and its name makes no series.
    unknown = client.post(
        "/scenarios/nowhere-1/v1/chat/completions", json={"messages": []}, headers=ADMIN
    )
    assert unknown.status_code == 404
    samples = scrape(client)
    chat_route = "/scenarios/{scenario}/v1/chat/completions"
    common = {"method": "POST", "status": "200", "scenario": "support"}
    assert value(samples, "reef_requests_total", route=chat_route, format="chat", **common) == 2
    assert (
        value(samples, "reef_requests_total", route="/v1/responses", format="responses", **common)
        == 1
    )
    messages_route = "/scenarios/{scenario}/v1/messages"
    assert (
        value(samples, "reef_requests_total", route=messages_route, format="messages", **common)
        == 1
    )
    refused = {"method": "POST", "status": "404", "scenario": "", "format": "chat"}
    assert value(samples, "reef_requests_total", route=chat_route, **refused) == 1
    assert not any("nowhere-1" in str(key) for key in samples)
    # Each inference call's time, the engine's and Reef's own apart.
    for name in ("reef_engine_duration_seconds", "reef_overhead_seconds"):
        assert value(samples, f"{name}_count", scenario="support", format="chat") == 2
        assert value(samples, f"{name}_count", scenario="support", format="responses") == 1
    engine = value(samples, "reef_engine_duration_seconds_sum", scenario="support", format="chat")
    whole = value(samples, "reef_request_duration_seconds_sum", route=chat_route, format="chat")
    own = value(samples, "reef_overhead_seconds_sum", scenario="support", format="chat")
    assert engine is not None
    assert whole is not None
    assert own is not None
    assert 0 < engine < whole  # the whole route's includes the refused call
    assert own > 0
    # The ledger's transactions: at least one per admitted call, none failed.
    writes = value(samples, "reef_store_write_duration_seconds_count", scenario="support")
    assert writes is not None
    assert 1 <= writes <= 4
    assert value(samples, "reef_store_write_failures_total", scenario="support") is None


def test_stream_cuts_are_counted_by_who_cut(client: TestClient) -> None:
    assert "aborted" in chat(client, "BREAK now", stream=True).text
    assert "without [DONE]" in chat(client, "NODONE", stream=True).text
    whole = chat(client, "fine", stream=True)
    assert whole.status_code == 200
    assert "[DONE]" in whole.text
    samples = scrape(client)
    cuts = {"scenario": "support", "format": "chat"}
    assert value(samples, "reef_stream_cuts_total", reason="engine_error", **cuts) == 1
    assert value(samples, "reef_stream_cuts_total", reason="engine_ended", **cuts) == 1
    assert value(samples, "reef_stream_cuts_total", reason="client_left", **cuts) is None
    # A stream is timed to its last byte, its engine's events included.
    assert value(samples, "reef_engine_duration_seconds_count", **cuts) == 3


def test_refusals_are_counted_by_reason(client: TestClient) -> None:
    """rule: P-REP-1 — a report naming a call twice is refused, and counted by its reason."""
    record_id = chat(client, "hello").headers["x-reef-record-id"]
    report = {"id": "r1", "references": [record_id, record_id], "score": 1.0}
    refused = client.post("/reef/scenarios/support/reports", json=report, headers=ADMIN)
    assert refused.status_code == 400
    missing = {"id": "r2", "references": ["inf-missing"], "score": 1.0}
    assert client.post("/reef/scenarios/support/reports", json=missing, headers=ADMIN).is_error
    unauthorised = client.post("/reef/scenarios/support/reports", json=report)
    assert unauthorised.status_code == 401
    samples = scrape(client)
    route = "/reef/scenarios/{scenario}/reports"
    assert value(samples, "reef_refusals_total", route=route, reason="duplicate") == 1
    assert value(samples, "reef_refusals_total", route=route, reason="missing") == 1
    assert value(samples, "reef_refusals_total", route=route, reason="unauthorized") == 1


def test_the_metrics_scope_guards_the_route(client: TestClient) -> None:
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=ADMIN).status_code == 403  # admin is not metrics
    limited = client.get("/metrics", headers=LIMITED)
    assert limited.status_code == 403  # the figures name every scenario
    assert "limited to scenarios" in limited.json()["message"]
    assert client.get("/metrics", headers=SCRAPER).status_code == 200


def test_without_tokens_loopback_clients_only(
    storage_url: str, storage_database: Database, engine_url: str
) -> None:
    text = (DEPLOYMENT % {"url": storage_url, "engine": engine_url}).replace(
        auth_section(*TOKENS), ""
    )
    app = service_app(
        text, storage_url, storage_database, options=ServerOptions(allow_unauthenticated=True)
    )
    with TestClient(app, base_url="http://127.0.0.1") as beyond:
        assert beyond.get("/metrics").status_code == 403  # TestClient's peer is "testclient"
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 5000)) as local:
        answer = local.get("/metrics")
    assert answer.status_code == 200
    assert "reef_requests_total" in answer.text


def test_store_figures_carry_the_process_that_computed_them(
    storage_url: str, storage_database: Database, engine_url: str
) -> None:
    """Two processes on one store each export the trainer's figures, each under its own
    process label; a lease taken over counts as a takeover."""
    ScenarioSettings(storage_database, "support").set(
        snapshot_key("noop"),
        {
            "updated_at": time.time(),
            "ready_samples": 7,
            "buffer_size": 8,
            "served_artifact": "art-9",
            "pipeline": {"stale_samples": 2, "held_with_stale_group": 1},
        },
    )
    DropCounters(storage_database, "support").add("stale", 3, trainer="noop")
    DropCounters(storage_database, "support").add("evicted", 2)
    leases = TrainerLeases(storage_database, "support", ttl=0.01)
    assert leases.try_acquire("noop", "proc-a") is not None
    time.sleep(0.02)  # the claim lapses: another process takes over
    assert leases.try_acquire("noop", "proc-b") is not None
    for process in ("proc-a", "proc-b"):
        with TestClient(app_of(storage_url, storage_database, engine_url, process)) as client:
            samples = scrape(client)
        trainer = {"process": process, "scenario": "support", "trainer": "noop"}
        assert value(samples, "reef_trainer_ready_samples", **trainer) == 7
        assert value(samples, "reef_trainer_buffer_samples", **trainer) == 8
        assert value(samples, "reef_trainer_stale_samples", **trainer) == 2
        assert value(samples, "reef_trainer_held_with_stale_samples", **trainer) == 1
        assert value(samples, "reef_dropped_samples_total", reason="stale", **trainer) == 3
        scenario_drops = {**trainer, "trainer": "", "reason": "evicted"}
        assert value(samples, "reef_dropped_samples_total", **scenario_drops) == 2
        assert value(samples, "reef_served_artifact_info", artifact="art-9", **trainer) == 1
        assert value(samples, "reef_trainer_lease_info", holder="proc-b", **trainer) == 1
        assert value(samples, "reef_trainer_lease_takeovers_total", **trainer) == 1


def test_each_application_counts_its_own(
    storage_url: str, storage_database: Database, engine_url: str
) -> None:
    with TestClient(app_of(storage_url, storage_database, engine_url)) as first:
        assert chat(first, "one").status_code == 200
        with TestClient(app_of(storage_url, storage_database, engine_url)) as second:
            assert chat(second, "two").status_code == 200
            assert chat(second, "three").status_code == 200
            counted_second = scrape(second)
        counted_first = scrape(first)
    route = {"route": "/scenarios/{scenario}/v1/chat/completions", "method": "POST"}
    labels = {**route, "scenario": "support", "format": "chat", "status": "200"}
    assert value(counted_first, "reef_requests_total", **labels) == 1
    assert value(counted_second, "reef_requests_total", **labels) == 2


def test_every_exported_name_is_listed(client: TestClient) -> None:
    """METRIC_NAMES (what the dashboard's check reads) is exactly what a scrape exports, each
    family as its samples are named (a counter's with ``_total``, an info's with ``_info``)."""
    answer = client.get("/metrics", headers=SCRAPER)
    suffix = {"counter": "_total", "info": "_info"}
    exported = {
        family.name + suffix.get(family.type, "")
        for family in text_string_to_metric_families(answer.text)
    }
    assert exported == METRIC_NAMES


def test_the_service_runs_without_prometheus_client_and_opentelemetry(
    without_modules: Callable[..., dict[str, str]],
    tmp_path: Path,
    engine_url: str,
) -> None:
    """reef imports without the metrics and otel extras; /metrics then says which extra it
    needs, every other route answers, and neither library was imported."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    script = f"""
import json, sys
from starlette.testclient import TestClient
from reef.storage import open_database
from reef.testing.service import service_app
text = {DEPLOYMENT % {"url": url, "engine": engine_url}!r}
app = service_app(text, {url!r}, open_database({url!r}))
headers = {{"authorization": "Bearer admin-secret-for-tests"}}
with TestClient(app) as client:
    metrics = client.get("/metrics", headers={{"authorization": "Bearer scraper-secret-for-tests"}})
    call = client.post("/scenarios/support/v1/chat/completions",
                       json={{"messages": [{{"role": "user", "content": "hi"}}]}}, headers=headers)
loaded = any(sys.modules.get(m) is not None for m in ("prometheus_client", "opentelemetry"))
print(json.dumps([metrics.status_code, metrics.json()["message"], call.status_code, loaded]))
"""
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=without_modules("prometheus_client", "opentelemetry"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    status, message, call, imported = json.loads(done.stdout.splitlines()[-1])
    assert status == 501
    assert "reef-core[metrics]" in message
    assert call == 200
    assert imported is False


def stalling_engine() -> Any:
    """An OpenAI-compatible engine whose stream sends its first chunk, then nothing more until
    the connection closes (a model that takes long to go on)."""
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def complete(request: Any) -> StreamingResponse:
        async def chunks() -> Any:
            chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                     "choices": [{"index": 0, "delta": {"role": "assistant", "content": "a"},
                                  "finish_reason": None}]}  # fmt: skip
            yield f"data: {json.dumps(chunk)}\n\n".encode()
            await asyncio.Event().wait()

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", complete, methods=["POST"])])


def test_a_client_that_leaves_a_stream_is_counted(
    storage_url: str, storage_database: Database
) -> None:
    with serve_on_loopback(stalling_engine()) as engine:
        app = app_of(storage_url, storage_database, engine)
        with serve_on_loopback(app) as reef, httpx.Client(base_url=reef, timeout=30) as client:
            with client.stream(
                "POST",
                "/scenarios/support/v1/chat/completions",
                json={"messages": [{"role": "user", "content": "hi"}], "stream": True},
                headers=ADMIN,
            ) as answer:
                assert next(answer.iter_lines()).startswith("data: ")
            # The client left; Reef hears of it when it next writes or polls the connection.
            deadline = time.monotonic() + 30
            cuts = {"scenario": "support", "format": "chat", "reason": "client_left"}
            while time.monotonic() < deadline:
                scraped = scrape(client)
                if value(scraped, "reef_stream_cuts_total", **cuts) == 1:
                    break
                time.sleep(0.1)
            assert value(scraped, "reef_stream_cuts_total", **cuts) == 1
