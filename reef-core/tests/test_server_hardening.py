"""The service against hostile input and careless deployments: token secrets checked when the
deployment is read, presented tokens compared exactly, data items and scenario names kept from
tokens of other scenarios, request bodies bounded before anything acts on them (depth, 64-bit
integers, lone surrogates, non-finite numbers, a string for a list), and a stream the engine
ends without ``[DONE]`` reported to the client as broken off. Through Starlette's TestClient
against real stores and the scripted engine on loopback."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from starlette.testclient import TestClient

from reef.core.atif import trajectory_to_json
from reef.core.atif_build import trajectory_from_records
from reef.core.deployment import MIN_TOKEN_LENGTH, DeploymentError
from reef.core.records import InferenceRecord
from reef.plugins.scenarios import load_deployment
from reef.server import RECORD_ID_HEADER
from reef.server.request_json import MAX_DEPTH
from reef.storage import Database, RecordStore
from reef.testing.engines import scripted_engine
from reef.testing.service import (
    ServiceToken,
    serve_on_loopback,
    service_app,
    service_test_plugins,
)

ADMIN_TOKEN = ServiceToken("admin", ("infer", "feedback", "admin"))
SUPPORT_TOKEN = ServiceToken("support-feeder", ("infer", "feedback"), ("support",))
BILLING_TOKEN = ServiceToken("billing-feeder", ("infer", "feedback"), ("billing",))
ADMIN, SUPPORT, BILLING = (t.headers for t in (ADMIN_TOKEN, SUPPORT_TOKEN, BILLING_TOKEN))

DEPLOYMENT = """
storage: {url: "%(url)s"}
serving: {engine: "%(engine)s/v1"}
auth:
  tokens:
%(tokens)s
scenarios:
  support:
    recipe: servicetest
    training: {component: noop}
  billing:
    recipe: servicetest
    training: {component: noop}
"""
TOKENS = "".join(token.entry() for token in (ADMIN_TOKEN, SUPPORT_TOKEN, BILLING_TOKEN))


def deployment_text(url: str, engine: str, tokens: str = TOKENS) -> str:
    return DEPLOYMENT % {"url": url, "engine": engine, "tokens": tokens.rstrip("\n")}


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[str, Any]]:
    app = scripted_engine()
    with serve_on_loopback(app) as url:
        yield url, app


@pytest.fixture
def client(
    storage_url: str, storage_database: Database, engine: tuple[str, Any]
) -> Iterator[TestClient]:
    app = service_app(deployment_text(storage_url, engine[0]), storage_url, storage_database)
    with TestClient(app) as test_client:
        yield test_client


# -- secrets, read with the deployment ---------------------------------------------------------


def problems_of(tokens: str, environ: dict[str, str] | None = None) -> str:
    with pytest.raises(DeploymentError) as raised:
        load_deployment(
            deployment_text("sqlite:///unused.db", "http://127.0.0.1:9", tokens),
            plugins=service_test_plugins(),
            environ=environ or {},
        )
    return str(raised.value)


@pytest.mark.parametrize("secret", ['""', "short-secret", '"${EMPTY}"'])
def test_an_empty_or_short_secret_is_refused_stating_the_minimum(secret: str) -> None:
    problems = problems_of(
        f"    admin: {{token: {secret}, scopes: [admin]}}\n", environ={"EMPTY": ""}
    )
    assert f"at least {MIN_TOKEN_LENGTH} characters" in problems
    assert "$.auth.tokens.admin.token" in problems


def test_two_tokens_with_one_secret_are_refused_naming_both() -> None:
    problems = problems_of(
        "    reader: {token: one-shared-secret-value, scopes: [infer]}\n"
        "    writer: {token: one-shared-secret-value, scopes: [admin]}\n"
    )
    assert "'reader' and 'writer' have the same secret" in problems


# -- presented tokens --------------------------------------------------------------------------


def test_an_empty_presented_token_is_unauthorised(client: TestClient) -> None:
    for header in ("Bearer ", "Bearer    ", "Bearer"):
        answer = client.get("/reef/status", headers={"authorization": header})
        assert answer.status_code == 401, header


def test_only_ascii_spaces_surround_a_token(client: TestClient) -> None:
    """U+00A0 and U+0085 are not spaces of the header: a token wrapped in them is unknown."""
    secret = ADMIN_TOKEN.secret
    assert client.get("/reef/status", headers={"authorization": f"Bearer  {secret}  "}).is_success
    for space in ("\xa0", "\x85"):
        for header in (f"Bearer {space}{secret}{space}", f"Bearer {space}"):
            raw = [(b"authorization", header.encode("latin-1"))]
            answer = client.get("/reef/status", headers=raw)
            assert answer.status_code == 401, repr(header)


# -- what a token of one scenario sees ---------------------------------------------------------


def atif(trajectory_id: str) -> dict[str, Any]:
    record = InferenceRecord(
        "c1",
        "billing",
        {"messages": [{"role": "user", "content": "hello"}]},
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi there"}}]},
    )
    return trajectory_to_json(trajectory_from_records([record], trajectory_id=trajectory_id))


def test_an_item_belongs_to_the_scenarios_of_the_token_that_uploaded_it(
    client: TestClient,
) -> None:
    uploaded = client.post("/reef/items", json={"trajectory": atif("invoice")}, headers=BILLING)
    assert uploaded.status_code == 201
    # Attached nowhere: a token of another scenario can neither read, attach nor delete it.
    assert client.get("/reef/items/invoice", headers=SUPPORT).status_code == 404
    assert client.post("/reef/scenarios/support/items/invoice", headers=SUPPORT).status_code == 404
    assert client.delete("/reef/items/invoice", headers=SUPPORT).status_code == 404
    # Nor learn its content by uploading under its id.
    taken = client.post(
        "/reef/items", json={"id": "invoice", "trajectory": atif("x")}, headers=SUPPORT
    )
    assert taken.status_code == 409
    assert "taken" in taken.json()["message"]
    assert client.get("/reef/items/invoice", headers=BILLING).status_code == 200
    assert client.get("/reef/items/invoice", headers=ADMIN).status_code == 200
    assert client.delete("/reef/items/invoice", headers=BILLING).status_code == 200


def test_an_item_of_an_unlimited_token_is_not_seen_by_a_limited_one(client: TestClient) -> None:
    client.post("/reef/items", json={"trajectory": atif("global")}, headers=ADMIN)
    assert client.get("/reef/items/global", headers=SUPPORT).status_code == 404
    assert client.get("/reef/items/global", headers=ADMIN).status_code == 200


def test_an_unknown_scenario_lists_only_the_scenarios_the_token_may_see(
    client: TestClient,
) -> None:
    answer = client.post("/reef/scenarios/nope/reports", json={}, headers=SUPPORT)
    assert answer.status_code == 404
    assert "support" in answer.json()["message"]
    assert "billing" not in answer.json()["message"]
    chat = client.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}]},
        headers={**SUPPORT, "x-reef-scenario": "nope"},
    )
    assert chat.status_code == 404
    assert "billing" not in chat.json()["message"]
    assert "billing" in client.post("/reef/scenarios/nope/reports", json={}, headers=ADMIN).text


# -- bounded bodies ----------------------------------------------------------------------------


def chat_raw(client: TestClient, body: bytes) -> Any:
    return client.post(
        "/scenarios/support/v1/chat/completions",
        content=body,
        headers={**ADMIN, "content-type": "application/json"},
    )


def refused(answer: Any, field: str, words: str) -> None:
    assert answer.status_code == 400, answer.text
    (problem,) = answer.json()["problems"]
    assert problem["field"] == field, problem
    assert words in problem["reason"], problem


def stored(database: Database, scenario: str = "support") -> list[str]:
    return [r.id for r in RecordStore(database, scenario).read_after(None)]


def test_nesting_beyond_the_limit_is_refused_naming_it(
    client: TestClient, storage_database: Database, engine: tuple[str, Any]
) -> None:
    calls = engine[1].state.calls
    refused(chat_raw(client, b"[" * 200_000), "$", f"deeper than {MAX_DEPTH}")
    deep = b'{"a":' * 100_000 + b"1" + b"}" * 100_000
    metadata = b'{"id": "r", "references": ["x"], "metadata": ' + deep + b"}"
    answer = client.post(
        "/reef/scenarios/support/reports",
        content=metadata,
        headers={**ADMIN, "content-type": "application/json"},
    )
    refused(answer, "$", f"deeper than {MAX_DEPTH}")
    # Deeper than the limit, yet shallow enough to parse: refused where it goes too deep.
    nested: Any = "x"
    for _ in range(MAX_DEPTH + 5):
        nested = [nested]
    body = {"messages": [{"role": "user", "content": "hi"}], "extra": nested}
    answer = chat_raw(client, json.dumps(body).encode())
    assert answer.status_code == 400
    assert answer.json()["problems"][0]["field"].startswith("$.extra[0][0]")
    # At the limit it is accepted.
    within: Any = "x"
    for _ in range(MAX_DEPTH - 3):
        within = [within]
    body = {"messages": [{"role": "user", "content": "hi"}], "extra": within}
    assert chat_raw(client, json.dumps(body).encode()).status_code == 200
    assert engine[1].state.calls == calls + 1


def test_an_integer_beyond_64_bits_is_refused(client: TestClient) -> None:
    body = b'{"id": "r", "references": ["x"], "score": ' + b"9" * 400 + b"}"
    answer = client.post(
        "/reef/scenarios/support/reports",
        content=body,
        headers={**ADMIN, "content-type": "application/json"},
    )
    refused(answer, "$.score", "beyond 64 bits")
    chat = b'{"messages": [{"role": "user", "content": "hi"}], "seed": 18446744073709551616}'
    refused(chat_raw(client, chat), "$.seed", "beyond 64 bits")


def test_a_lone_surrogate_is_refused_before_the_engine_is_called(
    client: TestClient, storage_database: Database, engine: tuple[str, Any]
) -> None:
    calls = engine[1].state.calls
    chat = b'{"messages": [{"role": "user", "content": "hi \\ud800"}]}'
    refused(chat_raw(client, chat), "$.messages[0].content", "lone surrogate")
    key = b'{"messages": [{"role": "user", "content": "hi", "\\udfff": 1}]}'
    refused(chat_raw(client, key), "$.messages[0]", "lone surrogate")
    report = client.post(
        "/reef/scenarios/support/reports",
        content=b'{"id": "r\\ud800", "references": ["x"]}',
        headers={**ADMIN, "content-type": "application/json"},
    )
    refused(report, "$.id", "lone surrogate")
    assert engine[1].state.calls == calls
    assert stored(storage_database) == []


def test_a_number_too_large_for_a_float_is_refused(
    client: TestClient, storage_database: Database, engine: tuple[str, Any]
) -> None:
    calls = engine[1].state.calls
    body = b'{"messages": [{"role": "user", "content": "hi"}], "temperature": 1e400}'
    refused(chat_raw(client, body), "$.temperature", "not finite")
    refused(chat_raw(client, body.replace(b"1e400", b"-Infinity")), "$", "not a JSON number")
    assert engine[1].state.calls == calls
    assert stored(storage_database) == []


def test_a_string_where_a_list_belongs_is_refused_by_name(client: TestClient) -> None:
    answer = client.post(
        "/reef/scenarios/support/reports",
        json={"id": "r", "references": "abc"},
        headers=ADMIN,
    )
    refused(answer, "$.references", "a list")
    chat = chat_raw(client, b'{"messages": "hello"}')
    refused(chat, "$.messages", "a list")


# -- streams -----------------------------------------------------------------------------------


def test_a_stream_the_engine_ends_without_done_reaches_the_client_as_an_error(
    client: TestClient, storage_database: Database
) -> None:
    """docs/decisions.md#engine-abort: the record is marked aborted, and the client is told
    with an error event instead of a normal end."""
    body = {"messages": [{"role": "user", "content": "NODONE please"}], "stream": True}
    with client.stream(
        "POST", "/scenarios/support/v1/chat/completions", json=body, headers=ADMIN
    ) as answer:
        record_id = answer.headers[RECORD_ID_HEADER]
        events = [line for line in answer.iter_lines() if line.startswith("data: ")]
    assert events[-1] != "data: [DONE]"
    last = json.loads(events[-1].removeprefix("data: "))
    assert last["error"]["type"] == "aborted"
    assert "[DONE]" in last["error"]["message"]
    # The ledger writes in arrival order: once a later call is stored, so is the abort.
    later = chat_raw(client, b'{"messages": [{"role": "user", "content": "after"}]}')
    assert later.status_code == 200
    stored = RecordStore(storage_database, "support").get(record_id)
    assert stored is not None
    assert isinstance(stored.record, InferenceRecord)
    assert stored.record.aborted


def test_a_complete_stream_ends_with_done(client: TestClient) -> None:
    body = {"messages": [{"role": "user", "content": "weather?"}], "stream": True}
    with client.stream(
        "POST", "/scenarios/support/v1/chat/completions", json=body, headers=ADMIN
    ) as answer:
        events = [line for line in answer.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert not any('"error"' in event for event in events)
