"""The HTTP API through Starlette's TestClient against real stores (SQLite, and PostgreSQL when
configured) and a scripted engine on loopback: auth, admission of reports (P-REP-1..3, 15),
data items (P-UP-1..5), training modes (P-MODE-13, 14), instructions, the manual buffer, status,
limits, and the OpenAPI document against the real routes."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

# The server extra (reef-core[server]); without it reef-core's own tests skip this module.
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from starlette.routing import Route
from starlette.testclient import TestClient

from reef.core.atif import trajectory_to_json
from reef.core.atif_build import trajectory_from_records
from reef.core.deployment import Deployment
from reef.core.records import InferenceRecord, Report
from reef.core.trajectory_index import TrajectoryIndex
from reef.plugins.scenarios import load_deployment
from reef.server import (
    RECORD_ID_HEADER,
    ServerOptions,
    UnauthenticatedServiceError,
    create_app,
)
from reef.server.status import status_table
from reef.storage import (
    Database,
    DropCounters,
    RecordCapacity,
    RecordStore,
    ScenarioSettings,
    TrainerSamples,
)
from reef.storage.scenario_settings import snapshot_key
from reef.testing.engines import scripted_engine
from reef.testing.service import (
    ServiceToken,
    auth_section,
    serve_on_loopback,
    service_app,
    service_test_plugins,
)

TOKENS = (
    ServiceToken("admin", ("infer", "feedback", "admin")),
    ServiceToken("agent", ("infer",)),
    ServiceToken("grader", ("feedback",), ("support",)),
)
ADMIN, AGENT, GRADER = (token.headers for token in TOKENS)

DEPLOYMENT = (
    """
storage: {url: "%(url)s"}
serving: {engine: "%(engine)s/v1"}
"""
    + auth_section(*TOKENS)
    + """scenarios:
  support:
    recipe: servicetest
    training: {component: noop}
  billing:
    recipe: servicetest
    pipeline: {sample2job: {class: "reef.testing.service:AutoOnlyJobData"}}
    training: {component: noop}
"""
)


def load(url: str, engine: str, text: str = DEPLOYMENT) -> Deployment:
    return load_deployment(text % {"url": url, "engine": engine}, plugins=service_test_plugins())


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    with serve_on_loopback(scripted_engine()) as url:
        yield url


@pytest.fixture
def client(storage_url: str, storage_database: Database, engine_url: str) -> Iterator[TestClient]:
    text = DEPLOYMENT % {"url": storage_url, "engine": engine_url}
    with TestClient(service_app(text, storage_url, storage_database)) as test_client:
        yield test_client


def call(client: TestClient, scenario: str, messages: list[dict[str, Any]], **extra: Any) -> str:
    """One chat call; the id of its inference record."""
    response = client.post(
        f"/scenarios/{scenario}/v1/chat/completions",
        json={"model": "m", "messages": messages, **extra},
        headers=AGENT,
    )
    assert response.status_code == 200, response.text
    return response.headers[RECORD_ID_HEADER]


def conversation(client: TestClient, scenario: str, question: str) -> tuple[str, str]:
    """A two-call tool-using conversation; the ids of its first and last call."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    first = client.post(
        f"/scenarios/{scenario}/v1/chat/completions",
        json={"messages": messages},
        headers=AGENT,
    )
    reply = first.json()["choices"][0]["message"]
    call_id = reply["tool_calls"][0]["id"]
    messages += [reply, {"role": "tool", "tool_call_id": call_id, "content": "42"}]
    last = call(client, scenario, messages)
    return first.headers[RECORD_ID_HEADER], last


def stored_rows(database: Database, scenario: str) -> list[tuple[str, str]]:
    return [(r.id, r.kind) for r in RecordStore(database, scenario).read_after(None)]


# -- the OpenAPI document --------------------------------------------------------------------


def test_openapi_document_lists_exactly_the_routes_of_the_app(client: TestClient) -> None:
    document = client.get("/openapi.json").json()
    documented = {
        (method.upper(), path) for path, ops in document["paths"].items() for method in ops
    }
    served = {
        # A parameter that may hold a "/" ({sample_id:path}) is documented without converter.
        (method, re.sub(r"\{([a-z_]+):[a-z]+\}", r"{\1}", route.path))
        for route in client.app.routes  # type: ignore[attr-defined]
        if isinstance(route, Route)
        for method in (route.methods or ()) - {"HEAD"}
    }
    assert documented == served
    schemas = document["components"]["schemas"]

    def refs(value: Any) -> Iterator[str]:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "$ref":
                    yield item
                else:
                    yield from refs(item)
        elif isinstance(value, list):
            for item in value:
                yield from refs(item)

    for ref in refs(document):
        assert ref.removeprefix("#/components/schemas/") in schemas, ref
    report = schemas["ReportBody"]
    assert set(report["required"]) == {"id", "references"}
    assert report["additionalProperties"] is False


def test_documented_request_bodies_are_the_ones_the_routes_read(client: TestClient) -> None:
    """A body missing a documented required key is refused naming exactly that key."""
    document = client.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            body = op.get("requestBody")
            if body is None:
                continue
            name = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
            required = schemas[name].get("required", [])
            url = path.replace("{scenario}", "support").replace("{item_id}", "x")
            answer = client.request(
                method.upper(), url, json={}, headers={**ADMIN, "x-reef-scenario": "support"}
            )
            assert answer.status_code == 400, (path, answer.text)
            fields = {p["field"] for p in answer.json()["problems"]}
            assert {f"$.{key}" for key in required} <= fields, (path, fields)


# -- auth ------------------------------------------------------------------------------------


def test_tokens_scopes_and_scenario_limits(client: TestClient, storage_database: Database) -> None:
    body = {"id": "r", "references": ["x"]}
    assert client.post("/reef/scenarios/support/reports", json=body).status_code == 401
    wrong = {"authorization": "Bearer nope"}
    assert (
        client.post("/reef/scenarios/support/reports", json=body, headers=wrong).status_code == 401
    )
    refused = client.post("/reef/scenarios/support/reports", json=body, headers=AGENT)
    assert refused.status_code == 403
    assert refused.json()["problems"][0]["reason"] == "token 'agent' lacks the 'feedback' scope"
    limited = client.post("/reef/scenarios/billing/reports", json=body, headers=GRADER)
    assert limited.status_code == 403
    assert "billing" in limited.json()["message"]
    assert client.get("/reef/status", headers=GRADER).status_code == 403
    assert client.get("/reef/status", headers=ADMIN).status_code == 200
    assert stored_rows(storage_database, "support") == []


def test_running_without_tokens_needs_an_explicit_setting(
    storage_url: str, storage_database: Database, engine_url: str
) -> None:
    text = DEPLOYMENT.split("auth:\n")[0] + "scenarios:\n" + DEPLOYMENT.split("\nscenarios:\n")[1]
    deployment = load(storage_url, engine_url, text)
    databases = {storage_url: storage_database}
    with pytest.raises(UnauthenticatedServiceError, match=r"no auth\.tokens"):
        create_app(deployment, databases=databases, plugins=service_test_plugins())
    app = create_app(
        deployment,
        databases=databases,
        plugins=service_test_plugins(),
        options=ServerOptions(allow_unauthenticated=True),
    )
    with TestClient(app, base_url="http://127.0.0.1") as test_client:
        # TestClient's peer is "testclient", not a loopback address: refused, although the
        # Host names loopback.
        answer = test_client.get("/reef/status")
        assert answer.status_code == 403
        assert answer.json()["problems"][0]["field"] == "client"
    with pytest.raises(UnauthenticatedServiceError, match="choose one"):
        create_app(
            load(storage_url, engine_url),
            databases=databases,
            plugins=service_test_plugins(),
            options=ServerOptions(allow_unauthenticated=True),
        )


# -- reports ---------------------------------------------------------------------------------


def report(report_id: str, references: list[str], **extra: Any) -> dict[str, Any]:
    return {"id": report_id, "references": references, "score": 1.0, **extra}


def post_report(client: TestClient, body: dict[str, Any], scenario: str = "support") -> Any:
    return client.post(f"/reef/scenarios/{scenario}/reports", json=body, headers=GRADER | ADMIN)


def test_report_references_must_be_last_calls_of_this_scenario(
    client: TestClient, storage_database: Database
) -> None:
    """rule: P-REP-1, P-REP-2 — missing, wrong-kind, duplicate, foreign and inner references
    are refused with the reason and the field, and nothing is stored."""
    first, last = conversation(client, "support", "weather?")
    _, foreign = conversation(client, "billing", "invoice?")
    assert post_report(client, report("ok", [last])).status_code == 201
    before = stored_rows(storage_database, "support")
    cases = {
        "inner": ([first], "$.references[0]"),
        "duplicate": ([last, last], "$.references[1]"),
        "missing": ([last, "inf-nope"], "$.references[1]"),
        "foreign": ([foreign], "$.references[0]"),
        "wrong-kind": (["ok"], "$.references[0]"),
    }
    for reason, (references, field) in cases.items():
        answer = post_report(client, report(f"bad-{reason}", references))
        assert answer.status_code == 400, reason
        body = answer.json()
        assert body["error"] == f"report_rejected:{reason}"
        assert body["problems"][0]["field"] == field
        if reason == "inner":
            assert last in body["message"]
    assert stored_rows(storage_database, "support") == before


def test_report_cannot_opt_out_of_training(client: TestClient, storage_database: Database) -> None:
    """rule: P-REP-3 — metadata.training.eligible is refused even when true; a negative score
    is feedback."""
    _, last = conversation(client, "support", "q")
    for eligible in (True, False):
        body = report("e", [last], metadata={"training": {"eligible": eligible}})
        answer = post_report(client, body)
        assert answer.status_code == 400
        assert answer.json()["problems"][0]["field"] == "$.metadata.training.eligible"
    assert post_report(client, report("neg", [last], score=-3.0)).status_code == 201
    assert [k for _, k in stored_rows(storage_database, "support")].count("report") == 1


def test_identical_retry_gets_the_original_receipt_even_after_eviction(
    client: TestClient, storage_database: Database
) -> None:
    """rule: P-REP-15 — an identical retry returns its original receipt, also after source
    eviction and after the trajectory went on; changed content under the same id is a 409."""
    _, last = conversation(client, "support", "retry me")
    first = post_report(client, report("r1", [last], feedback="good"))
    assert first.status_code == 201
    assert post_report(client, report("r1", [last], feedback="good")).json() == first.json()
    changed = post_report(client, report("r1", [last], feedback="bad"))
    assert changed.status_code == 409
    assert changed.json()["problems"][0]["field"] == "$.id"
    # Evict every body (a writer with a capacity of one body), and continue the trajectory.
    evicting = RecordStore(storage_database, "support", capacity=RecordCapacity(max_bodies=1))
    evicting.append(Report("filler", "support", ("x",)))
    assert RecordStore(storage_database, "support").get(last).record is None  # type: ignore[union-attr]
    retry = post_report(client, report("r1", [last], feedback="good"))
    assert retry.status_code == 200
    assert retry.json() == first.json()


def test_admission_reads_the_store_not_memory(
    client: TestClient, storage_database: Database
) -> None:
    """rule: P-REP-2 — storage is authoritative: a call another process stored is a valid
    reference, and a call it continued is an inner one."""
    store = RecordStore(storage_database, "support")
    index = store.trajectory_index()
    request = {"messages": [{"role": "user", "content": "elsewhere"}]}
    reply = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]}
    parent = InferenceRecord("other-1", "support", request, reply)
    store.append(parent, link=index.add(parent))
    assert post_report(client, report("from-store", ["other-1"])).status_code == 201
    child_request = {
        "messages": [*request["messages"], {"role": "assistant", "content": "hi"},
                     {"role": "user", "content": "more"}]
    }  # fmt: skip
    child = InferenceRecord("other-2", "support", child_request, reply)
    store.append(child, link=index.add(child))
    answer = post_report(client, report("inner-now", ["other-1"]))
    assert answer.json()["error"] == "report_rejected:inner"


# -- data items ------------------------------------------------------------------------------


def atif(trajectory_id: str, *, agent: bool = True) -> dict[str, Any]:
    record = InferenceRecord(
        "c1",
        "support",
        {"messages": [{"role": "user", "content": "hello"}]},
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi there"}}]},
    )
    body = trajectory_to_json(trajectory_from_records([record], trajectory_id=trajectory_id))
    if not agent:
        body["steps"] = [s for s in body["steps"] if s["source"] != "agent"]
    return body


def test_items_upload_attach_detach(client: TestClient, storage_database: Database) -> None:
    """rule: P-UP-1, P-UP-2, P-UP-3, P-UP-5 — an item is stored once, attached as an upload
    the pipeline reads ({"trajectory": ...}), refused where no trainer takes uploads or where
    uploaded_sample refuses it (naming it), and forgotten when detached."""
    samples = TrainerSamples(storage_database, "support")
    created = client.post("/reef/items", json={"trajectory": atif("t1")}, headers=GRADER)
    assert created.status_code == 201
    assert created.json() == {"id": "t1", "scenarios": []}
    again = client.post("/reef/items", json={"trajectory": atif("t1")}, headers=GRADER)
    assert again.status_code == 200
    other = atif("t1")
    other["steps"][0]["message"] = "changed"
    assert client.post("/reef/items", json={"trajectory": other}, headers=GRADER).status_code == 409
    bad = atif("t-bad")
    bad["steps"][0]["step_id"] = 7
    refused = client.post("/reef/items", json={"trajectory": bad}, headers=GRADER)
    assert refused.status_code == 400
    assert refused.json()["problems"][0]["field"].startswith("$.trajectory")

    attached = client.post("/reef/scenarios/support/items/t1", headers=GRADER)
    assert attached.status_code == 201
    assert attached.json()["scenarios"] == ["support"]
    (stored,) = samples.get(["t1"])
    assert stored.origin == "upload"
    assert stored.body["trajectory"] == atif("t1")
    nobody = client.post("/reef/scenarios/billing/items/t1", headers=ADMIN)
    assert nobody.status_code == 400
    assert "no trainer of scenario 'billing' accepts" in nobody.json()["message"]
    assert TrainerSamples(storage_database, "billing").get(["t1"]) == []

    client.post("/reef/items", json={"trajectory": atif("t2", agent=False)}, headers=GRADER)
    no_agent = client.post("/reef/scenarios/support/items/t2", headers=GRADER)
    assert no_agent.status_code == 400
    assert "'t2'" in no_agent.json()["message"]
    assert samples.get(["t2"]) == []

    detached = client.delete("/reef/scenarios/support/items/t1", headers=GRADER)
    assert detached.status_code == 200
    assert detached.json()["scenarios"] == []
    assert samples.get(["t1"]) == []
    assert client.delete("/reef/scenarios/support/items/t1", headers=GRADER).status_code == 404
    # Attached again: a new upload at the end of store order.
    reattached = client.post("/reef/scenarios/support/items/t1", headers=GRADER)
    assert reattached.status_code == 201
    assert reattached.json()["scenarios"] == ["support"]
    (again,) = samples.get(["t1"])
    assert again.position > stored.position
    assert client.post("/reef/scenarios/support/items/t1", headers=GRADER).status_code == 200
    assert client.delete("/reef/items/t2", headers=GRADER).status_code == 200
    assert client.get("/reef/items/t2", headers=GRADER).status_code == 404


def test_deleting_an_item_removes_its_uploads(
    client: TestClient, storage_database: Database
) -> None:
    """rule: P-UP-2 — deleting an item is the item leaving every scenario."""
    client.post("/reef/items", json={"id": "doc", "trajectory": atif("t3")}, headers=GRADER)
    client.post("/reef/scenarios/support/items/doc", headers=GRADER)
    assert client.get("/reef/items/doc", headers=GRADER).json()["scenarios"] == ["support"]
    assert client.delete("/reef/items/doc", headers=GRADER).json()["scenarios"] == ["support"]
    assert TrainerSamples(storage_database, "support").get(["doc"]) == []


# -- training control ------------------------------------------------------------------------


def test_mode_is_validated_and_stored(client: TestClient, storage_database: Database) -> None:
    """rule: P-MODE-12, P-MODE-13, P-MODE-14 — an invalid name is a 400, a mode a stage does
    not support a 409, a selected mode is stored in the scenario's settings."""
    settings = ScenarioSettings(storage_database, "support")
    bad = client.post("/reef/scenarios/support/update", json={"training_mode": "x"}, headers=ADMIN)
    assert bad.status_code == 400
    assert bad.json()["problems"][0]["field"] == "$.training_mode"
    ok = client.post(
        "/reef/scenarios/support/update", json={"training_mode": "manual"}, headers=ADMIN
    )
    assert ok.json() == {"scenario": "support", "training_mode": "manual"}
    assert settings.get("training_mode") == "manual"
    unsupported = client.post(
        "/reef/scenarios/billing/update", json={"training_mode": "manual"}, headers=ADMIN
    )
    assert unsupported.status_code == 409
    assert "AutoOnlyJobData" in unsupported.json()["message"]
    assert ScenarioSettings(storage_database, "billing").get("training_mode") is None
    grader = client.post(
        "/reef/scenarios/support/update", json={"training_mode": "auto"}, headers=GRADER
    )
    assert grader.status_code == 403
    assert settings.get("training_mode") == "manual"


def test_instructions_and_the_manual_buffer(client: TestClient, storage_database: Database) -> None:
    """rule: P-MODE-5, P-MODE-10 — instructions are queued in the store (idempotent by request
    id), the manual buffer is edited in the store; unknown samples change nothing."""
    samples = TrainerSamples(storage_database, "support")
    url = "/reef/scenarios/support/instructions"
    first = client.post(url, json={"request_id": "q1", "text": "go"}, headers=ADMIN)
    assert first.status_code == 201
    assert first.json()["queued"] is True
    assert (
        client.post(url, json={"request_id": "q1", "text": "go"}, headers=ADMIN).status_code == 200
    )
    assert (
        client.post(url, json={"request_id": "q1", "text": "no"}, headers=ADMIN).status_code == 409
    )
    bad = client.post(url, json={"request_id": "q2", "action": "STOP"}, headers=ADMIN)
    assert bad.status_code == 400
    assert bad.json()["problems"][0]["field"] == "$.action"
    (instruction,) = samples.unread_instructions("noop")
    assert instruction.body == {"request_id": "q1", "text": "go", "parameters": {}}

    client.post("/reef/items", json={"trajectory": atif("b1")}, headers=ADMIN)
    client.post("/reef/scenarios/support/items/b1", headers=ADMIN)
    insert = "/reef/scenarios/support/insert_into_buffer"
    unknown = client.post(insert, json={"sample_ids": ["b1", "nope"]}, headers=ADMIN)
    assert unknown.status_code == 400
    assert unknown.json()["problems"][0]["field"] == "$.sample_ids[1]"
    assert samples.manual_buffer("noop") == []
    assert client.post(insert, json={"sample_ids": ["b1"]}, headers=ADMIN).json() == {
        "scenario": "support",
        "buffers": {"noop": ["b1"]},
    }
    wrong_trainer = client.post(insert, json={"sample_ids": ["b1"], "trainer": "x"}, headers=ADMIN)
    assert wrong_trainer.status_code == 400
    remove = "/reef/scenarios/support/remove_from_buffer"
    assert client.post(remove, json={"sample_ids": ["b1"]}, headers=ADMIN).json()["buffers"] == {
        "noop": []
    }


def test_status_reads_stores_and_the_trainer_snapshot(
    client: TestClient, storage_database: Database
) -> None:
    """rule: P-MODE-3, P-BUF-8 — status shows mode, buffer figures, pending instructions,
    drops by reason and what the trainer's snapshot says."""
    settings = ScenarioSettings(storage_database, "support")
    client.post("/reef/scenarios/support/instructions", json={"request_id": "a"}, headers=ADMIN)
    DropCounters(storage_database, "support").add("stale", 3, trainer="noop")
    DropCounters(storage_database, "support").add("evicted", 2)
    before = client.get("/reef/status", headers=ADMIN).json()
    support = next(s for s in before["scenarios"] if s["scenario"] == "support")
    (trainer,) = support["trainers"]
    assert trainer["ready_samples"] is None
    assert trainer["job_samples"] == 1
    assert trainer["pending_instructions"] == 1
    assert trainer["drops"] == {"stale": 3}
    assert support["drops"] == {"evicted": 2}
    assert support["training_mode"] == "auto"
    settings.set(
        snapshot_key("noop"),
        {
            "updated_at": 5.0,
            "ready_samples": 7,
            "job_samples": 4,
            "buffer_size": 8,
            "queued_instructions": ["a", "b"],
            "background_jobs_running": True,
            "running_job": {"job_id": "j1", "data_id": "support:data:3"},
            "served_artifact": "art-9",
            "last_errors": [{"at": 4.0, "where": "submit", "error": "boom"}],
            "holder": "host:12:abcd",
            "jobs_ended": 3,
            "job_counts": {"retokenized_samples": 5},
            "paused": "the engine did not take the last 3 published artifacts",
            "extensions": {"ecc": {"epoch": {"index": 2, "version_id": "g2"}}},
            "pipeline": {"ended_records": {"aborted": 1, "stale": 2}},
        },
    )
    after = client.get("/reef/status", headers=ADMIN).json()
    (trainer,) = next(s for s in after["scenarios"] if s["scenario"] == "support")["trainers"]
    assert trainer["holder"] == "host:12:abcd"
    assert trainer["jobs_ended"] == 3
    # Replies trained from their text, without the engine's token ids: shown, in the table too.
    assert trainer["job_counts"] == {"retokenized_samples": 5}
    assert "support/noop: in 3 jobs: retokenized_samples=5" in status_table(after).splitlines()
    # A trainer that waits for its engine to take an artifact says so.
    assert trainer["paused"] == "the engine did not take the last 3 published artifacts"
    assert (
        "support/noop: PAUSED: the engine did not take the last 3 published artifacts"
        in status_table(after).splitlines()
    )
    assert trainer["ready_samples"] == 7
    assert trainer["buffer_size"] == 8
    assert trainer["pending_instructions"] == 2
    assert trainer["running_job"]["job_id"] == "j1"
    assert trainer["served_artifact"] == "art-9"
    assert trainer["last_errors"][0]["error"] == "boom"
    assert trainer["snapshot_at"] == 5.0
    # what the extensions report of the scenario (reef_scenario_status), as `reef status`
    # prints it too
    assert trainer["extensions"] == {"ecc": {"epoch": {"index": 2, "version_id": "g2"}}}
    assert 'support/noop: ecc: {"epoch": {"index": 2, "version_id": "g2"}}' in (
        status_table(after).splitlines()
    )
    # What ended without training before the next job commits it to the drop counts: in the
    # table too, not only in the JSON.
    assert (
        "support/noop: ended without training, counted in DROPS when the next job commits:"
        " aborted=1, stale=2"
    ) in status_table(after).splitlines()


def test_a_scenario_without_training_records_calls_and_takes_reports(
    storage_url: str, storage_database: Database, engine_url: str
) -> None:
    """A team that only collects data first: no training section, no trainer; calls are
    recorded, reports admitted, and status says that nothing trains."""
    text = (
        'storage: {url: "%(url)s"}\nserving: {engine: "%(engine)s/v1"}\n'
        + auth_section(TOKENS[0])
        + "scenarios: {collect: {recipe: servicetest}}\n"
    )
    app = create_app(
        load(storage_url, engine_url, text),
        databases={storage_url: storage_database},
        plugins=service_test_plugins(),
    )
    with TestClient(app) as client:
        answered = client.post(
            "/scenarios/collect/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "note"}]},
            headers=ADMIN,
        )
        assert answered.status_code == 200
        call_id = answered.json()["id"]
        reported = client.post(
            "/reef/scenarios/collect/reports",
            json=report("kept", [call_id]),
            headers=ADMIN,
        )
        assert reported.status_code == 201, reported.text
        status = client.get("/reef/status", headers=ADMIN).json()
    assert stored_rows(storage_database, "collect") == [(call_id, "inference"), ("kept", "report")]
    (collect,) = status["scenarios"]
    assert collect["trainers"] == []
    assert "collect: no training section: its calls and reports are kept, nothing trains" in (
        status_table(status).splitlines()
    )


# -- limits and malformed requests ------------------------------------------------------------


def test_bad_bodies_name_the_field_and_store_nothing(
    storage_url: str, storage_database: Database, engine_url: str
) -> None:
    app = create_app(
        load(storage_url, engine_url),
        databases={storage_url: storage_database},
        plugins=service_test_plugins(),
        options=ServerOptions(max_body_bytes=2000),
    )
    with TestClient(app) as client:
        url = "/reef/scenarios/support/reports"
        big = client.post(url, json=report("big", ["x" * 3000]), headers=ADMIN)
        assert big.status_code == 413
        as_json = {**ADMIN, "content-type": "application/json"}
        not_json = client.post(url, content=b"{nope", headers=as_json)
        assert not_json.status_code == 400
        assert not_json.json()["problems"][0]["field"] == "$"
        nan = client.post(url, content=b'{"id": "n", "references": ["a"], "score": NaN}',
                          headers=as_json)  # fmt: skip
        assert nan.status_code == 400
        extra = client.post(url, json={**report("e", ["a"]), "colour": 1}, headers=ADMIN)
        assert extra.status_code == 400
        assert "colour" in extra.json()["message"]
        typed = client.post(url, json={"id": 5, "references": ["a"]}, headers=ADMIN)
        assert typed.json()["problems"][0]["field"] == "$.id"
        chat = client.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]},
            headers=AGENT,
        )  # fmt: skip
        assert chat.status_code == 400
        assert chat.json()["problems"][0]["field"] == "x-reef-scenario"
        empty = client.post(
            "/scenarios/support/v1/chat/completions", json={"messages": []}, headers=AGENT
        )
        assert empty.status_code == 400
        assert empty.json()["problems"][0]["field"] == "$.messages"
        unknown = client.post("/scenarios/nope/v1/chat/completions", json={}, headers=AGENT)
        assert unknown.status_code == 404
        assert "nope" in unknown.json()["message"]
        missing = client.get("/reef/nothing", headers=ADMIN)
        assert missing.status_code == 404
        assert missing.json()["error"] == "not_found"
    assert stored_rows(storage_database, "support") == []


def test_a_tag_header_without_a_name_is_refused_saying_how_to_name_it(
    client: TestClient, storage_database: Database
) -> None:
    refused = client.post(
        "/scenarios/support/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "tags"}]},
        headers={**AGENT, "x-reef-tag-": "blue"},
    )
    assert refused.status_code == 400
    (problem,) = refused.json()["problems"]
    assert problem["field"] == "x-reef-tag-"
    assert "send x-reef-tag-<name>: <value>" in problem["reason"]
    assert stored_rows(storage_database, "support") == []


def test_inference_records_link_and_carry_tags_and_artifact(
    client: TestClient, storage_database: Database
) -> None:
    """rule: P-SET-2, P-STALE-4 — each exchange is recorded with the artifact that answered and
    its tags, and the second call of a conversation is the first's child."""
    first, last = conversation(client, "support", "link?")
    tagged = client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "tags"}]},
        headers={**AGENT, "x-reef-scenario": "support", "x-reef-tag-team": "blue"},
    )
    store = RecordStore(storage_database, "support")
    index: TrajectoryIndex = store.trajectory_index()
    assert index.parent(last) == first
    record = store.get(tagged.headers[RECORD_ID_HEADER]).record  # type: ignore[union-attr]
    assert isinstance(record, InferenceRecord)
    assert record.tags == {"team": "blue"}
    assert record.artifact_id == "artifact-scripted-1"
    assert record.response == tagged.json()
    assert not record.aborted
    assert json.loads(json.dumps(record.request)) == {
        "messages": [{"role": "user", "content": "tags"}]
    }
