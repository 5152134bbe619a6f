"""Reef over real HTTP on loopback (uvicorn in a thread), driven by the official ``openai``
client: multi-turn tool-calling conversations, streamed and not, recorded as inference records
that link into the expected trajectories (P-SET-2), with the full response also when streamed,
the artifact that answered, and an abort mark when the engine breaks off
(docs/decisions.md#engine-abort)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

# The server extra (reef-core[server]) and the openai client (a dev requirement); without
# them reef-core's own tests skip this module.
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")
pytest.importorskip("openai")

import httpx
import openai

from reef.core.records import InferenceRecord
from reef.engines.interface import EngineUnavailable
from reef.server import (
    RECORD_ID_HEADER,
    ServerOptions,
    ServiceConfigError,
    ServiceRuntime,
    UnauthenticatedServiceError,
    check_bind_address,
)
from reef.storage import Database, RecordStore, open_database
from reef.testing.engines import SCRIPTED_ARTIFACT, scripted_engine, scripted_reply
from reef.testing.service import (
    ServiceToken,
    auth_section,
    serve_on_loopback,
    served_scenario,
    service_app,
)

AGENT = ServiceToken("agent", ("infer", "feedback"))
AUTH = auth_section(AGENT)


class LocalFunction:
    """A function-level engine, as the built-in local engine is: it answers with the scripted
    engine's replies and names its artifact in ``system_fingerprint``."""

    def complete(self, request: Mapping[str, Any]) -> dict[str, Any]:
        message = scripted_reply(list(request["messages"]))
        return {
            "id": "local-1",
            "object": "chat.completion",
            "created": 1,
            "model": "local",
            "system_fingerprint": "artifact-local-7",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
                }
            ],
        }


class LocalRuntime(ServiceRuntime):
    def local_engine(self, scenario: str) -> LocalFunction:
        return LocalFunction()


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    with serve_on_loopback(scripted_engine()) as url:
        yield f"{url}/v1"


@pytest.fixture
def database(tmp_path: Path) -> Iterator[tuple[str, Database]]:
    url = f"sqlite:///{tmp_path / 'reef.db'}"
    opened = open_database(url)
    yield url, opened
    opened.dispose()


def serve(
    database: tuple[str, Database],
    engine: str,
    *,
    auth: str = AUTH,
    runtime: ServiceRuntime | None = None,
    options: ServerOptions | None = None,
) -> Any:
    url, opened = database
    text = served_scenario(url, engine, auth)
    return serve_on_loopback(service_app(text, url, opened, options=options, runtime=runtime))


def agent_turns(
    client: openai.OpenAI, questions: list[str], *, stream: bool
) -> tuple[list[str], list[dict[str, Any]]]:
    """One conversation: for each question the model calls ``lookup``, gets its result and
    answers. Returns the record id of every call, in order, and the final messages."""
    tools = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
            },
        }
    ]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Use the tool."}]
    ids: list[str] = []
    for question in questions:
        messages.append({"role": "user", "content": question})
        while True:
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=messages, tools=tools, stream=stream  # type: ignore[arg-type]
            )  # fmt: skip
            ids.append(raw.headers[RECORD_ID_HEADER])
            message = collect(raw.parse(), stream=stream)
            messages.append(message)
            if not message.get("tool_calls"):
                break
            for call in message["tool_calls"]:
                query = json.loads(call["function"]["arguments"])["query"]
                messages.append(
                    {"role": "tool", "tool_call_id": call["id"], "content": f"found {query}"}
                )
    return ids, messages


def collect(parsed: Any, *, stream: bool) -> dict[str, Any]:
    """The assistant message of a completion, or of a stream's chunks."""
    if not stream:
        return dict(parsed.choices[0].message.model_dump(exclude_none=True))
    content = ""
    calls: dict[int, dict[str, Any]] = {}
    for chunk in parsed:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for part in delta.tool_calls or []:
            call = calls.setdefault(
                part.index,
                {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
            )
            call["id"] = part.id or call["id"]
            call["function"]["name"] += (part.function.name or "") if part.function else ""
            call["function"]["arguments"] += (
                (part.function.arguments or "") if part.function else ""
            )
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def records(opened: Database, ids: list[str]) -> list[InferenceRecord]:
    store = RecordStore(opened, "support")
    found = [store.get(i) for i in ids]
    return [r.record for r in found if r is not None and isinstance(r.record, InferenceRecord)]


@pytest.mark.parametrize("stream", [False, True])
def test_openai_client_conversations_link_into_trajectories(
    database: tuple[str, Database], engine_url: str, stream: bool
) -> None:
    """rule: P-SET-2 — each call of a conversation is the child of the call before it; two
    conversations are two trajectories; each record holds the full response, the artifact
    that answered and the tags."""
    _, opened = database
    with serve(database, engine_url) as reef:
        by_path = openai.OpenAI(base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret)
        by_header = openai.OpenAI(
            base_url=f"{reef}/v1",
            api_key=AGENT.secret,
            default_headers={"x-reef-scenario": "support", "x-reef-tag-episode": "7"},
        )
        first, _ = agent_turns(by_path, ["weather in Oslo", "and in Rome"], stream=stream)
        second, final = agent_turns(by_header, ["flights"], stream=stream)
    assert len(first) == 4
    assert len(second) == 2
    index = RecordStore(opened, "support").trajectory_index()
    for ids in (first, second):
        assert index.trajectory(ids[-1]) == tuple(ids)
        assert index.is_last_call(ids[-1])
    assert index.parent(second[0]) is None
    stored = records(opened, first + second)
    assert len(stored) == 6
    assert all(r.artifact_id == SCRIPTED_ARTIFACT and not r.is_engine_abort for r in stored)
    assert [r.tags for r in stored[4:]] == [{"episode": "7"}] * 2
    # The recorded response of the last call is the reply the client saw, whole.
    (reply,) = stored[-1].reply_messages
    assert reply["content"] == final[-1]["content"] == "answer: found flights"
    call = stored[-2].reply_messages[0]["tool_calls"][0]
    assert json.loads(call["function"]["arguments"]) == {"query": "flights"}
    # A report on the last calls is admitted against what the stream stored.
    body = {"id": f"rep-{stream}", "references": [first[-1], second[-1]], "score": 0.5}
    with serve(database, engine_url) as reef:
        answer = httpx.post(
            f"{reef}/reef/scenarios/support/reports",
            json=body,
            headers=AGENT.headers,
        )
    assert answer.status_code == 201, answer.text


def test_engine_breaking_off_a_stream_is_recorded_as_aborted(
    database: tuple[str, Database], engine_url: str
) -> None:
    """docs/decisions.md#engine-abort: a stream the engine broke off is recorded, marked
    aborted, with what had arrived; the client sees the error."""
    _, opened = database
    with serve(database, engine_url) as reef:
        client = openai.OpenAI(base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret)
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "BREAK now"}], stream=True
        )
        broken = raw.headers[RECORD_ID_HEADER]
        with pytest.raises(openai.APIError, match="broke off"):
            list(raw.parse())
        # The ledger writes in arrival order: once a later call is stored, so is the abort.
        later, _ = agent_turns(client, ["after"], stream=False)
    (record,) = records(opened, [broken])
    assert record.aborted
    assert record.is_engine_abort
    assert record.response is not None
    assert record.response["choices"][0]["finish_reason"] is None
    assert records(opened, later)


def test_a_stream_the_engine_ends_without_done_is_an_error_to_the_openai_client(
    database: tuple[str, Database], engine_url: str
) -> None:
    """docs/decisions.md#engine-abort: a clean close without ``[DONE]`` is not a normal end;
    the agent's client raises instead of handing it an empty turn."""
    _, opened = database
    with serve(database, engine_url) as reef:
        client = openai.OpenAI(base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret)
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "NODONE now"}], stream=True
        )
        cut = raw.headers[RECORD_ID_HEADER]
        with pytest.raises(openai.APIError, match="without \\[DONE\\]"):
            list(raw.parse())
        agent_turns(client, ["after"], stream=False)
    (record,) = records(opened, [cut])
    assert record.aborted


def test_a_whole_answer_reaches_the_client_byte_for_byte_as_the_engine_sent_it(
    database: tuple[str, Database],
) -> None:
    """The service hands on the engine's own bytes (its spacing, key order and escapes), with
    the record's id as the completion's id, and records the same answer, parsed."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    sent = (
        b'{ "object":"chat.completion", "id":"exact-1",\n "choices":[{"index":0,'
        b'"message":{"role":"assistant","content":"caf\\u00e9 \xe2\x98\x95"},'
        b'"finish_reason":"stop"}], "created":1, "model":"m" }'
    )

    async def answer(_request: Request) -> Response:
        return Response(sent, media_type="application/json")

    engine = Starlette(routes=[Route("/v1/chat/completions", answer, methods=["POST"])])
    _, opened = database
    with serve_on_loopback(engine) as engine_base, serve(database, f"{engine_base}/v1") as reef:
        reply = httpx.post(
            f"{reef}/scenarios/support/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
            headers=AGENT.headers,
        )
    assert reply.status_code == 200
    record_id = reply.headers[RECORD_ID_HEADER]
    assert reply.content == sent.replace(b'"exact-1"', f'"{record_id}"'.encode())
    (record,) = records(opened, [record_id])
    assert record.response == json.loads(reply.content)
    assert record.response["choices"][0]["message"]["content"] == "caf\u00e9 \u2615"


@pytest.mark.parametrize("stream", [False, True])
def test_an_agent_reports_on_a_call_by_the_id_its_openai_client_holds(
    database: tuple[str, Database], engine_url: str, stream: bool
) -> None:
    """An agent names the call it reports on by ``completion.id`` (every chunk's ``id`` when
    streamed), as its client returns it: no raw response, no Reef header. The record-id header
    gives the same id."""
    _, opened = database
    question = [{"role": "user", "content": "open"}]
    with serve(database, engine_url) as reef:
        client = openai.OpenAI(base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret)
        if stream:
            chunks = list(client.chat.completions.create(model="m", messages=question, stream=True))  # type: ignore[arg-type]  # fmt: skip
            (completion_id,) = {chunk.id for chunk in chunks}
        else:
            completion_id = client.chat.completions.create(model="m", messages=question).id  # type: ignore[arg-type]  # fmt: skip
        raw = client.chat.completions.with_raw_response.create(model="m", messages=question)  # type: ignore[arg-type]  # fmt: skip
        assert raw.parse().id == raw.headers[RECORD_ID_HEADER]
        report = httpx.post(
            f"{reef}/reef/scenarios/support/reports",
            json={"id": f"report-{stream}", "references": [completion_id], "score": 1.0},
            headers=AGENT.headers,
        )
    assert report.status_code == 201, report.text
    assert report.json()["references"] == [completion_id]
    (record,) = records(opened, [completion_id])
    assert record.response is not None
    assert record.response["id"] == completion_id


def test_local_engine_answers_off_the_event_loop_and_names_its_artifact(
    database: tuple[str, Database],
) -> None:
    """The built-in engine kind (a function of the request) serves streamed and whole answers;
    the record carries the artifact the engine named."""
    _, opened = database
    with serve(database, "local", runtime=LocalRuntime()) as reef:
        client = openai.OpenAI(base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret)
        whole, _ = agent_turns(client, ["one"], stream=False)
        streamed, messages = agent_turns(client, ["two"], stream=True)
    assert messages[-1]["content"] == "answer: found two"
    stored = records(opened, whole + streamed)
    assert {r.artifact_id for r in stored} == {"artifact-local-7"}
    assert RecordStore(opened, "support").trajectory_index().trajectory(streamed[-1]) == tuple(
        streamed
    )


def test_an_engine_reef_cannot_reach_as_configured_stops_the_service_before_it_listens(
    database: tuple[str, Database], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An engine URL that is not http(s), or a proxy setting of a kind Reef does not speak,
    is refused when the application is made, naming the scenario; ``reef serve`` prints it
    and exits 1."""
    with pytest.raises(ServiceConfigError, match=r"scenario 'support': engine URL 'ftp://"):
        serve(database, "ftp://engine.example/v1")
    monkeypatch.setenv("all_proxy", "socks5://127.0.0.1:1080")
    with pytest.raises(ServiceConfigError, match=r"scenario 'support': .*not an http:// proxy"):
        serve(database, "https://engine.example:8443/v1")
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(
        f'storage: {{url: "{database[0]}"}}\n'
        'serving: {engine: "https://engine.example:8443/v1"}\n'
        "scenarios:\n"
        "  word: {recipe: grouped, pipeline: {sample2job: {config: {job_samples: 4}}}}\n"
    )
    command = [sys.executable, "-m", "reef.cli", "serve", str(deployment)]
    command += ["--allow-unauthenticated", "--no-trainers", "--log-level", "warning"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert "reef serve: scenario 'word': the proxy setting 'socks5://127.0.0.1:1080'" in done.stderr


def test_without_tokens_only_loopback_is_served(
    database: tuple[str, Database], engine_url: str
) -> None:
    with pytest.raises(UnauthenticatedServiceError, match="loopback"):
        check_bind_address("0.0.0.0", authenticated=False)
    check_bind_address("127.0.0.1", authenticated=False)
    check_bind_address("0.0.0.0", authenticated=True)
    options = ServerOptions(allow_unauthenticated=True)
    with serve(database, engine_url, auth="", options=options) as reef:
        client = openai.OpenAI(base_url=f"{reef}/scenarios/support/v1", api_key="unused")
        ids, _ = agent_turns(client, ["open"], stream=False)
    assert len(ids) == 2


def test_reef_status_prints_a_table(database: tuple[str, Database], engine_url: str) -> None:
    """``reef status`` reads ``GET /reef/status`` of a running service and prints a row per
    scenario and trainer."""
    admin = ServiceToken("admin", ("admin",))
    with serve(database, engine_url, auth=auth_section(admin)) as reef:
        command = [sys.executable, "-m", "reef.cli", "status", "--url", reef]
        refused = subprocess.run(command, capture_output=True, text=True, check=False)
        printed = subprocess.run(
            [*command, "--token", admin.secret],
            capture_output=True,
            text=True,
            check=False,
        )
    assert refused.returncode == 1
    assert "401" in refused.stderr
    assert "give a token with the admin scope with --token or in REEF_TOKEN" in refused.stderr
    assert printed.returncode == 0, printed.stderr
    header, row = printed.stdout.splitlines()[:2]
    assert header.split()[:4] == ["SCENARIO", "TRAINER", "MODE", "READY"]
    assert row.split()[:3] == ["support", "noop", "auto"]


class NotYetPublished(LocalFunction):
    """The local engine before its first artifact: it cannot answer the first ``refusals``
    calls (:class:`reef.engines.interface.EngineUnavailable`, as ``LocalEngine`` raises)."""

    def __init__(self, refusals: int) -> None:
        self.refusals = refusals

    def complete(self, request: Mapping[str, Any]) -> dict[str, Any]:
        if self.refusals > 0:
            self.refusals -= 1
            raise EngineUnavailable("no artifact is published yet", retry_after=1)
        return super().complete(request)


def test_before_the_first_artifact_calls_are_told_to_retry_and_the_openai_client_does(
    database: tuple[str, Database],
) -> None:
    """A 503 with Retry-After in every API format, not a 400 a client gives up on; the
    ``openai`` client waits and retries it."""
    engine = NotYetPublished(refusals=3)

    class Runtime(ServiceRuntime):
        def local_engine(self, scenario: str) -> LocalFunction:
            return engine

    headers = {"authorization": f"Bearer {AGENT.secret}"}
    bodies = {
        "chat/completions": {"messages": [{"role": "user", "content": "hi"}]},
        "responses": {"model": "m", "input": "hi"},
        "messages": {
            "model": "m",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "hi"}],
        },
    }
    with serve(database, "local", runtime=Runtime()) as reef:
        for path in ("chat/completions", "responses"):
            refused = httpx.post(
                f"{reef}/scenarios/support/v1/{path}", json=bodies[path], headers=headers
            )
            assert refused.status_code == 503, refused.text
            assert refused.headers["retry-after"] == "1"
        refused = httpx.post(
            f"{reef}/scenarios/support/v1/messages",
            json=bodies["messages"],
            headers={"x-api-key": AGENT.secret},
        )
        assert refused.status_code == 503, refused.text
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["type"] == "overloaded_error"  # Anthropic SDKs retry it
        engine.refusals = 2
        client = openai.OpenAI(
            base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret, max_retries=2
        )
        answer = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert answer.choices[0].finish_reason in ("stop", "tool_calls")  # answered, after two 503s
    assert engine.refusals == 0
