"""The Responses and Messages routes over real HTTP on loopback, driven by the official
``openai`` (``responses.create``, ``responses.stream``) and ``anthropic`` (``messages.create``,
``messages.stream``) clients against a chat-only engine (the scripted one): tool loops streamed
and not, recorded in each format's shape and linked into trajectories (P-SET-2), chains by
``previous_response_id``, ``store: false``, errors in each format's shape, reports by the id
the SDK holds, broken streams, ``GET /v1/models``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("anthropic")
pytest.importorskip("openai")

import anthropic
import httpx
import openai
from sdk_streams import cut_stream

from reef.core.api_formats import MESSAGES, RESPONSES
from reef.core.atif_build import trajectory_from_records
from reef.core.records import InferenceRecord
from reef.storage import Database, RecordStore, open_database
from reef.testing.engines import SCRIPTED_ARTIFACT, scripted_engine
from reef.testing.service import ServiceToken, auth_section, serve_on_loopback, service_app

DEPLOYMENT = """
storage: {url: "%(url)s"}
serving: {engine: "%(engine)s", model: served-model}
%(auth)s
scenarios:
  support:
    recipe: servicetest
    training: {component: noop}
  other:
    recipe: servicetest
    training: {component: noop}
"""
AGENT = ServiceToken("agent", ("infer", "feedback"), ("support",))
AUTH = auth_section(AGENT)
RESPONSES_TOOLS: list[Any] = [
    {
        "type": "function",
        "name": "lookup",
        "description": "Look a query up.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        "strict": False,
    }
]
MESSAGES_TOOLS: list[Any] = [
    {
        "name": "lookup",
        "description": "Look a query up.",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}},
    }
]


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


def serve(database: tuple[str, Database], engine: str) -> Any:
    url, opened = database
    text = DEPLOYMENT % {"url": url, "engine": engine, "auth": AUTH}
    return serve_on_loopback(service_app(text, url, opened))


def stored(opened: Database, ids: list[str]) -> list[InferenceRecord]:
    store = RecordStore(opened, "support")
    found = [store.get(i) for i in ids]
    return [r.record for r in found if r is not None and isinstance(r.record, InferenceRecord)]


def responses_turns(
    client: Any, questions: list[str], *, stream: bool, chained: bool
) -> tuple[list[str], Any]:
    """An agent loop on the Responses API: each question, the ``lookup`` call it makes, its
    output, the answer. The whole conversation is resent, or only the new turn with
    ``previous_response_id``. Returns each response's id and the last response."""
    conversation: list[Any] = []
    ids: list[str] = []
    previous: str | None = None
    response: Any = None
    for question in questions:
        new: list[Any] = [{"role": "user", "content": question}]
        while True:
            sent = new if chained else conversation + new
            extra: dict[str, Any] = (
                {"previous_response_id": previous} if chained and previous else {}
            )
            if stream:
                with client.responses.stream(
                    model="m",
                    instructions="Use the tool.",
                    input=sent,
                    tools=RESPONSES_TOOLS,
                    **extra,
                ) as events:
                    kinds = [event.type for event in events]
                    response = events.get_final_response()
                assert kinds[:2] == ["response.created", "response.in_progress"]
                assert kinds[-1] == "response.completed"
            else:
                response = client.responses.create(
                    model="m",
                    instructions="Use the tool.",
                    input=sent,
                    tools=RESPONSES_TOOLS,
                    **extra,
                )
            ids.append(response.id)
            previous = response.id
            conversation += new + [item.model_dump(exclude_none=True) for item in response.output]
            calls = [item for item in response.output if item.type == "function_call"]
            if not calls:
                break
            new = [
                {
                    "type": "function_call_output",
                    "call_id": call.call_id,
                    "output": f"found {json.loads(call.arguments)['query']}",
                }
                for call in calls
            ]
    return ids, response


@pytest.mark.parametrize(
    ("stream", "chained"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_an_openai_responses_agent_loop_is_recorded_and_linked(
    database: tuple[str, Database], engine_url: str, stream: bool, chained: bool
) -> None:
    """rule: P-SET-2 — a Responses tool loop, resent whole or chained by
    ``previous_response_id``, links call to call; each record holds the request as sent and the
    response as the client got it, under the response's id, with the artifact that answered."""
    _, opened = database
    with serve(database, engine_url) as reef:
        client = openai.OpenAI(base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret)
        ids, last = responses_turns(
            client, ["weather in Oslo", "and in Rome"], stream=stream, chained=chained
        )
        report = httpx.post(
            f"{reef}/reef/scenarios/support/reports",
            json={"id": f"r-{stream}-{chained}", "references": [last.id], "score": 1.0},
            headers=AGENT.headers,
        )
    assert report.status_code == 201, report.text
    assert len(ids) == 4
    assert all(i.startswith("resp_") for i in ids)
    assert last.output_text == "answer: found and in Rome"
    index = RecordStore(opened, "support").trajectory_index()
    assert index.trajectory(ids[-1]) == tuple(ids)
    records = stored(opened, ids)
    assert [r.api_format for r in records] == [RESPONSES] * 4
    assert all(r.artifact_id == SCRIPTED_ARTIFACT and not r.is_engine_abort for r in records)
    assert records[-1].response is not None
    assert records[-1].response["id"] == last.id
    assert records[-1].response["output"] == [
        item.model_dump(mode="json", exclude_none=True) for item in last.output
    ]
    if chained:
        assert records[1].request["previous_response_id"] == ids[0]
        assert records[1].request["input"][0]["type"] == "function_call_output"
    trajectory = trajectory_from_records(records, trajectory_id="t")
    sources = [step.source for step in trajectory.steps]
    assert sources == ["system", "user", "agent", "agent", "user", "agent", "agent"]
    assert trajectory.steps[2].tool_calls is not None
    assert trajectory.steps[2].observation is not None
    assert trajectory.steps[-1].message == "answer: found and in Rome"
    made = [s.extra["reef"]["record_id"] for s in trajectory.steps if s.extra is not None]
    assert made == ids


def messages_turns(client: Any, questions: list[str], *, stream: bool) -> tuple[list[str], Any]:
    """An agent loop on the Messages API, as an Anthropic-SDK tool loop runs it."""
    conversation: list[Any] = []
    ids: list[str] = []
    message: Any = None
    for question in questions:
        conversation.append({"role": "user", "content": question})
        while True:
            asked = {
                "model": "m",
                "max_tokens": 64,
                "system": "Use the tool.",
                "messages": conversation,
                "tools": MESSAGES_TOOLS,
            }
            if stream:
                with client.messages.stream(**asked) as events:
                    kinds = [event.type for event in events]
                    message = events.get_final_message()
                assert kinds[0] == "message_start"
                assert "content_block_delta" in kinds
            else:
                message = client.messages.create(**asked)
            ids.append(message.id)
            conversation.append(
                {
                    "role": "assistant",
                    "content": [b.model_dump(exclude_none=True) for b in message.content],
                }
            )
            uses = [block for block in message.content if block.type == "tool_use"]
            if message.stop_reason != "tool_use":
                break
            conversation.append(
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": use.id,
                            "content": f"found {use.input['query']}",
                        }
                        for use in uses
                    ],
                }
            )
    return ids, message


@pytest.mark.parametrize("stream", [False, True])
def test_an_anthropic_messages_agent_loop_is_recorded_and_linked(
    database: tuple[str, Database], engine_url: str, stream: bool
) -> None:
    """rule: P-SET-2 — a Messages tool loop links call to call, each record in the Messages
    shape under the ``msg_...`` id the SDK holds, which a report names."""
    _, opened = database
    with serve(database, engine_url) as reef:
        client = anthropic.Anthropic(base_url=f"{reef}/scenarios/support", api_key=AGENT.secret)
        ids, last = messages_turns(client, ["weather in Oslo", "and in Rome"], stream=stream)
        report = httpx.post(
            f"{reef}/reef/scenarios/support/reports",
            json={"id": f"r-{stream}", "references": [last.id], "score": 1.0},
            headers=AGENT.headers,
        )
    assert report.status_code == 201, report.text
    assert len(ids) == 4
    assert all(i.startswith("msg_") for i in ids)
    assert last.content[0].text == "answer: found and in Rome"
    assert last.stop_reason == "end_turn"
    index = RecordStore(opened, "support").trajectory_index()
    assert index.trajectory(ids[-1]) == tuple(ids)
    records = stored(opened, ids)
    assert [r.api_format for r in records] == [MESSAGES] * 4
    assert records[-1].response is not None
    held = {key: value for key, value in records[-1].response.items() if value is not None}
    assert held == last.model_dump(mode="json", exclude_none=True)
    assert records[0].response is not None
    assert records[0].response["content"][0]["type"] == "tool_use"
    assert records[0].response["content"][0]["input"] == {"query": "weather in Oslo"}
    trajectory = trajectory_from_records(records, trajectory_id="t")
    assert [step.source for step in trajectory.steps] == [
        "system", "user", "agent", "agent", "user", "agent", "agent"
    ]  # fmt: skip


def test_a_chained_call_to_an_unknown_or_unstored_response_is_refused(
    database: tuple[str, Database], engine_url: str
) -> None:
    """``previous_response_id`` resolves only a stored response of the scenario: an unknown
    one, or one made with ``store: false``, is a 404 in OpenAI's shape; the call made with
    ``store: false`` is still recorded (it trains)."""
    _, opened = database
    with serve(database, engine_url) as reef:
        client = openai.OpenAI(base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret)
        with pytest.raises(openai.NotFoundError) as unknown:
            client.responses.create(model="m", input="hi", previous_response_id="resp_nope")
        unstored = client.responses.create(model="m", input="hi", store=False)
        with pytest.raises(openai.NotFoundError) as refused:
            client.responses.create(model="m", input="more", previous_response_id=unstored.id)
    assert unknown.value.body["param"] == "$.previous_response_id"  # type: ignore[index]
    assert "store: false" in refused.value.message
    (record,) = stored(opened, [unstored.id])
    assert record.request["store"] is False


def test_errors_come_in_each_formats_own_shape(
    database: tuple[str, Database], engine_url: str
) -> None:
    """An OpenAI client gets OpenAI-shaped errors and an Anthropic client Anthropic-shaped ones:
    a bad token, a scenario it may not call, a part Reef cannot forward (naming it)."""
    with serve(database, engine_url) as reef:
        base = f"{reef}/scenarios/support"
        claude = anthropic.Anthropic(base_url=base, api_key="wrong")
        with pytest.raises(anthropic.AuthenticationError) as bad_token:
            claude.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        assert bad_token.value.body["type"] == "error"  # type: ignore[index]
        claude = anthropic.Anthropic(base_url=f"{reef}/scenarios/other", api_key=AGENT.secret)
        with pytest.raises(anthropic.PermissionDeniedError):
            claude.messages.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
        claude = anthropic.Anthropic(base_url=base, api_key=AGENT.secret)
        with pytest.raises(anthropic.BadRequestError) as hosted:
            claude.messages.create(
                model="m",
                max_tokens=8,
                messages=[{"role": "user", "content": "hi"}],
                tools=[{"type": "web_search_20250305", "name": "web_search"}],
            )
        assert "$.tools[0]" in hosted.value.message
        client = openai.OpenAI(base_url=f"{base}/v1", api_key=AGENT.secret)
        with pytest.raises(openai.BadRequestError) as reference:
            client.responses.create(model="m", input=[{"type": "item_reference", "id": "x"}])
        assert reference.value.body["param"] == "$.input[0].type"  # type: ignore[index]
        with pytest.raises(openai.BadRequestError) as unknown:
            client.responses.create(model="m", input="hi", extra_body={"colour": "blue"})
        assert unknown.value.body["param"] == "$.colour"  # type: ignore[index]
        # Anthropic's clients (Claude Code among them) may send the key as x-api-key.
        keyed = {"x-api-key": AGENT.secret}
        missing = httpx.post(f"{base}/v1/messages", json={"model": "m"}, headers=keyed)
        assert missing.status_code == 400
        assert missing.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("api_format", [RESPONSES, MESSAGES])
def test_a_broken_stream_ends_with_the_formats_error_event_and_is_recorded_aborted(
    database: tuple[str, Database], engine_url: str, api_format: str
) -> None:
    """docs/decisions.md#engine-abort: the engine breaks off; the client's SDK sees the
    format's error event, and the record is marked aborted."""
    _, opened = database
    with serve(database, engine_url) as reef:
        base = f"{reef}/scenarios/support"
        broken = cut_stream(
            base, api_format, secret=AGENT.secret, model="m", text="BREAK now", said="broke off"
        )
        # The ledger writes in arrival order: once a later call is stored, so is the abort.
        httpx.post(f"{base}/v1/responses", json={"input": "after"}, headers=AGENT.headers)
    (record,) = stored(opened, [broken])
    assert record.aborted
    assert record.is_engine_abort
    assert record.api_format == api_format


def test_models_lists_what_the_callers_scenarios_serve(
    database: tuple[str, Database], engine_url: str
) -> None:
    """``GET /v1/models`` in OpenAI's shape: the scenarios the caller may call, each by the
    model its serving section names."""
    with serve(database, engine_url) as reef:
        client = openai.OpenAI(base_url=f"{reef}/v1", api_key=AGENT.secret)
        listed = [(m.id, m.model_extra) for m in client.models.list()]
        scoped = openai.OpenAI(base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret)
        assert [m.id for m in scoped.models.list()] == ["served-model"]
    assert listed == [("served-model", {"scenario": "support"})]


@pytest.mark.parametrize("mode", ["resent", "chained", "streamed"])
def test_an_openai_agents_sdk_agent_runs_its_tool_loop_through_reef(
    database: tuple[str, Database], engine_url: str, mode: str
) -> None:
    """rule: P-SET-2 — the OpenAI Agents SDK (its Responses model) runs a two-step tool loop
    through Reef: the conversation resent whole, chained with ``previous_response_id``
    (``auto_previous_response_id``), or streamed; the calls link into one trajectory whose ATIF
    has the tool call, its observation and the answer."""
    pytest.importorskip("agents")
    import agents

    agents.set_tracing_disabled(True)

    @agents.function_tool
    def lookup(query: str) -> str:
        """Look a query up."""
        return f"found {query}"

    _, opened = database
    with serve(database, engine_url) as reef:
        client = openai.AsyncOpenAI(base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret)
        model = agents.OpenAIResponsesModel(model="m", openai_client=client)
        agent = agents.Agent(
            name="support", instructions="Use the tool.", tools=[lookup], model=model
        )
        if mode == "streamed":

            async def streamed() -> Any:
                run = agents.Runner.run_streamed(agent, "weather in Oslo")
                async for _ in run.stream_events():
                    pass
                return run

            import asyncio

            result = asyncio.run(streamed())
        else:
            result = agents.Runner.run_sync(
                agent, "weather in Oslo", auto_previous_response_id=mode == "chained"
            )
    assert result.final_output == "answer: found weather in Oslo"
    ids = [response.response_id for response in result.raw_responses]
    assert len(ids) == 2
    index = RecordStore(opened, "support").trajectory_index()
    assert index.trajectory(ids[-1]) == tuple(ids)
    records = stored(opened, ids)
    if mode == "chained":
        assert records[1].request["previous_response_id"] == ids[0]
    trajectory = trajectory_from_records(records, trajectory_id="t")
    (call,) = trajectory.steps[2].tool_calls or ()
    assert (call.function_name, call.arguments) == ("lookup", {"query": "weather in Oslo"})
    assert trajectory.steps[2].observation is not None
    assert trajectory.steps[-1].message == "answer: found weather in Oslo"
