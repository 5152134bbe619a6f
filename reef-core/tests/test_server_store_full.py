"""A store that cannot write, as a full disk leaves it: ``reef serve`` in a subprocess whose
file-size limit is lowered to nothing while it runs (``prlimit``), then raised again. Every
request that needs a write gets the documented 503 ``store_unavailable`` with a reason (never
a plain 500); once that is known, chat calls are refused before their engine is called; and the
service recovers without a restart once the store can write."""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")
pytest.importorskip("prometheus_client")

import httpx
from prometheus_client.parser import text_string_to_metric_families

from reef.storage import RecordStore, open_database
from reef.testing.engines import scripted_engine
from reef.testing.serve import ServeProcess
from reef.testing.service import serve_on_loopback

if not hasattr(resource, "prlimit"):
    pytest.skip("needs resource.prlimit (Linux)", allow_module_level=True)

TOKEN = "store-full-admin-secret"
DEPLOYMENT = f"""
storage: {{url: "sqlite:///%(db)s"}}
serving: {{engine: "%(engine)s/v1"}}
auth: {{tokens: {{admin: {{token: {TOKEN}, scopes: [infer, feedback, admin, metrics]}}}}}}
scenarios:
  support:
    recipe: grouped
    pipeline:
      record2sample: {{config: {{group_size: 2}}}}
      sample2job: {{config: {{job_samples: 4}}}}
"""
#: How long the test waits for the service to recover (never a measured bound).
PATIENCE = 30.0


@pytest.fixture
def engine() -> Iterator[tuple[str, Any]]:
    app = scripted_engine()
    with serve_on_loopback(app) as url:
        yield url, app


def chat(client: httpx.Client, text: str) -> httpx.Response:
    return client.post(
        "/scenarios/support/v1/chat/completions",
        json={"messages": [{"role": "user", "content": text}]},
    )


def test_a_store_that_cannot_write_answers_503_and_recovers(
    tmp_path: Path, engine: tuple[str, Any]
) -> None:
    url, engine_app = engine
    db = tmp_path / "reef.db"
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(DEPLOYMENT % {"db": db, "engine": url}, encoding="utf-8")
    serve = ServeProcess(deployment, tmp_path / "serve.log", token=TOKEN)
    try:
        with httpx.Client(base_url=serve.base_url, headers=serve.headers, timeout=30) as client:
            first = chat(client, "before")
            assert first.status_code == 200, first.text
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.prlimit(serve.process.pid, resource.RLIMIT_FSIZE, (0, hard))

            report = client.post(
                "/reef/scenarios/support/reports",
                json={"id": "r1", "references": [first.headers["x-reef-record-id"]]},
            )
            assert report.status_code == 503, report.text
            body = report.json()
            assert body["error"] == "store_unavailable"
            assert body["problems"][0]["reason"]  # the database's own words
            calls = engine_app.state.calls
            for n in range(3):
                refused = chat(client, f"while full {n}")
                assert refused.status_code == 503, refused.text
                assert refused.json()["error"] == "store_unavailable"
            assert engine_app.state.calls == calls  # never forwarded

            resource.prlimit(serve.process.pid, resource.RLIMIT_FSIZE, (hard, hard))
            deadline = time.monotonic() + PATIENCE
            while (after := chat(client, "after")).status_code == 503:
                assert time.monotonic() < deadline, after.text
                time.sleep(0.2)
            assert after.status_code == 200, after.text
            assert serve.process.poll() is None  # recovered without a restart
            scraped = client.get("/metrics")
    finally:
        serve.stop()
    # What reef serve counted of it (docs/observe.md), read with Prometheus' own parser.
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(scraped.text)
        for sample in family.samples
    }
    failures = samples[("reef_store_write_failures_total", (("scenario", "support"),))]
    assert failures >= 1  # the report the ledger could not write
    refusals = [
        value
        for (name, labels), value in samples.items()
        if name == "reef_refusals_total" and ("reason", "store_unavailable") in labels
    ]
    assert sum(refusals) >= 4  # the report and the three calls
    database = open_database(f"sqlite:///{db}")
    try:
        stored = {r.id for r in RecordStore(database, "support").read_after(None)}
    finally:
        database.dispose()
    assert first.headers["x-reef-record-id"] in stored
    assert after.headers["x-reef-record-id"] in stored
    assert "r1" not in stored


def test_no_chat_call_reaches_the_engine_while_the_store_cannot_take_its_record(
    tmp_path: Path, engine: tuple[str, Any]
) -> None:
    """The store's health is decided by the write that failed, not by a probe that changes
    nothing: a nearly full disk takes such a probe (a page or two) and refuses the next
    record (tens of KiB). The store may grow by 8 KiB only; 150 chat calls of 20 KiB each come
    over some seconds (a probe a second). The engine answers the first one whose record the
    store refuses, and no other call whose answer could not be kept."""
    url, engine_app = engine
    db = tmp_path / "reef.db"
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(DEPLOYMENT % {"db": db, "engine": url}, encoding="utf-8")
    serve = ServeProcess(deployment, tmp_path / "serve.log", token=TOKEN)
    padding = " padding" * 2500  # 20 KB
    try:
        with httpx.Client(base_url=serve.base_url, headers=serve.headers, timeout=30) as client:
            for n in range(5):
                assert chat(client, f"before {n}").status_code == 200
            files = [db, db.with_name(db.name + "-wal")]
            room = max(f.stat().st_size for f in files if f.exists()) + 8192
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.prlimit(serve.process.pid, resource.RLIMIT_FSIZE, (room, hard))
            calls = engine_app.state.calls
            kept = 0
            for n in range(150):
                kept += chat(client, f"while full {n}{padding}").status_code == 200
                time.sleep(0.03)  # paces the load over some probe intervals; waits for nothing
            reached = engine_app.state.calls - calls
            resource.prlimit(serve.process.pid, resource.RLIMIT_FSIZE, (hard, hard))
            assert reached - kept == 1, f"{reached - kept} answers of the engine were not kept"
    finally:
        serve.stop()
