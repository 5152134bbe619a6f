"""Native forwarding (``serving.native_formats``): a Responses or Messages call is forwarded to
an engine that speaks the format itself, here the vLLM stand-in
(``doubles.engine_standins``, written from vLLM's serving code), and its answer passed back under
the record's id. Driven by the official ``openai`` and ``anthropic`` clients over loopback:
answers whole and streamed, chained calls resolved before they are forwarded, the engine's own
errors, a stream the engine cuts, reports by the id the SDK holds, and the refusal of a local
engine."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("anthropic")
pytest.importorskip("openai")

import anthropic
import httpx
import openai
from doubles.engine_standins import StandInState, vllm_standin
from sdk_streams import cut_stream

from reef.core.api_formats import MESSAGES, RESPONSES
from reef.core.deployment import DeploymentError
from reef.core.records import InferenceRecord
from reef.plugins.scenarios import load_deployment
from reef.storage import Database, RecordStore
from reef.testing.service import (
    ServiceToken,
    auth_section,
    serve_on_loopback,
    service_app,
    service_test_plugins,
)

MODEL = "served-model"
DEPLOYMENT = """
storage: {url: "%(url)s"}
serving: {engine: "%(engine)s", model: %(model)s, native_formats: %(native)s}
%(auth)s
scenarios:
  support:
    recipe: servicetest
    training: {component: noop}
"""
AGENT = ServiceToken("agent", ("infer", "feedback"), ("support",))


@pytest.fixture
def engine() -> Iterator[tuple[str, StandInState]]:
    app, state = vllm_standin(MODEL)
    with serve_on_loopback(app) as url:
        yield f"{url}/v1", state


@pytest.fixture
def database(storage_url: str, storage_database: Database) -> tuple[str, Database]:
    """The store, on SQLite and on PostgreSQL when one is configured."""
    return storage_url, storage_database


def serve(database: tuple[str, Database], engine_url: str, native: str) -> Any:
    url, opened = database
    text = DEPLOYMENT % {
        "url": url,
        "engine": engine_url,
        "model": MODEL,
        "native": native,
        "auth": auth_section(AGENT),
    }
    return serve_on_loopback(service_app(text, url, opened))


def stored(opened: Database, record_id: str) -> InferenceRecord:
    found = RecordStore(opened, "support").get(record_id)
    assert found is not None
    assert isinstance(found.record, InferenceRecord)
    return found.record


@pytest.mark.parametrize("stream", [False, True])
def test_a_responses_call_is_forwarded_whole_and_answered_as_the_engine_answers(
    database: tuple[str, Database], engine: tuple[str, StandInState], stream: bool
) -> None:
    """The engine gets the call's whole conversation (a chained call resolved through the
    records, ``previous_response_id`` gone, ``store: false``), and the client the engine's own
    answer under the record's id, streamed in the engine's own events."""
    url, state = engine
    _, opened = database
    with serve(database, url, "[openai.responses]") as reef:
        client = openai.OpenAI(base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret)

        def ask(**request: Any) -> Any:
            if not stream:
                return client.responses.create(model=MODEL, **request)
            with client.responses.stream(model=MODEL, **request) as events:
                kinds = [event.type for event in events]
                response = events.get_final_response()
            assert kinds[:3] == ["response.created", "response.in_progress",
                                 "response.output_item.added"]  # fmt: skip
            assert kinds[-1] == "response.completed"
            return response

        first = ask(instructions="Be brief.", input="weather in Oslo")
        second = ask(instructions="Be brief.", input="and in Rome", previous_response_id=first.id)
    assert first.id.startswith("resp_")
    assert first.output_text == f"{MODEL} answers weather in Oslo"
    assert [path for path, _ in state.received] == ["/v1/responses", "/v1/responses"]
    _, forwarded = state.received[1]
    assert "previous_response_id" not in forwarded
    assert forwarded["store"] is False
    assert forwarded["model"] == MODEL
    assert [item.get("role") for item in forwarded["input"]] == ["user", "assistant", "user"]
    assert forwarded["input"][0]["content"] == "weather in Oslo"
    assert forwarded["input"][-1]["content"] == "and in Rome"
    assert state.calls.get("/v1/chat/completions") is None  # nothing went through chat
    record = stored(opened, second.id)
    assert record.api_format == RESPONSES
    assert record.request["previous_response_id"] == first.id  # as the agent sent it
    assert record.response is not None
    assert record.response["id"] == second.id
    (item,) = record.response["output"]
    assert item["id"] == second.output[0].id
    assert item["content"][0]["text"] == second.output_text == f"{MODEL} answers and in Rome"
    assert record.response["usage"]["output_tokens"] == 3
    assert not record.aborted
    index = RecordStore(opened, "support").trajectory_index()
    assert index.trajectory(second.id) == (first.id, second.id)


@pytest.mark.parametrize("stream", [False, True])
def test_a_messages_call_is_forwarded_and_reported_by_the_id_the_sdk_holds(
    database: tuple[str, Database], engine: tuple[str, StandInState], stream: bool
) -> None:
    url, state = engine
    _, opened = database
    with serve(database, url, "[anthropic.messages]") as reef:
        claude = anthropic.Anthropic(base_url=f"{reef}/scenarios/support", api_key=AGENT.secret)
        request: dict[str, Any] = {
            "model": MODEL,
            "max_tokens": 16,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": "weather in Oslo"}],
        }
        if stream:
            with claude.messages.stream(**request) as events:
                kinds = [event.type for event in events]
                message = events.get_final_message()
            assert kinds[0] == "message_start"
            assert kinds[-1] == "message_stop"
        else:
            message = claude.messages.create(**request)
        report = httpx.post(
            f"{reef}/reef/scenarios/support/reports",
            json={"id": f"r-{stream}", "references": [message.id], "score": 1.0},
            headers=AGENT.headers,
        )
    assert report.status_code == 201, report.text
    assert message.id.startswith("msg_")
    assert message.content[0].text == f"{MODEL} answers weather in Oslo"  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    ((path, forwarded),) = state.received
    assert path == "/v1/messages"
    assert forwarded["system"] == "Be brief."  # as the agent sent it, not translated
    record = stored(opened, message.id)
    assert record.api_format == MESSAGES
    assert record.response is not None
    assert record.response["id"] == message.id
    assert record.response["content"] == [{"type": "text", "text": message.content[0].text}]  # type: ignore[union-attr]
    assert record.response["stop_reason"] == "end_turn"
    assert record.response["usage"]["output_tokens"] == 3


def test_the_engines_own_errors_reach_the_client_in_its_formats_shape(
    database: tuple[str, Database], engine: tuple[str, StandInState]
) -> None:
    """An adapter the engine does not hold: vLLM's 404, as each SDK reads its format's."""
    url, _ = engine
    with serve(database, url, "[openai.responses, anthropic.messages]") as reef:
        client = openai.OpenAI(base_url=f"{reef}/scenarios/support/v1", api_key=AGENT.secret)
        with pytest.raises(openai.NotFoundError) as responses_error:
            client.responses.create(model="no-such", input="hi")
        claude = anthropic.Anthropic(base_url=f"{reef}/scenarios/support", api_key=AGENT.secret)
        with pytest.raises(anthropic.NotFoundError) as messages_error:
            claude.messages.create(
                model="no-such", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
            )
    assert "does not exist" in responses_error.value.message
    assert messages_error.value.body["type"] == "error"  # type: ignore[index]
    assert "does not exist" in messages_error.value.message


@pytest.mark.parametrize("api_format", [RESPONSES, MESSAGES])
def test_a_stream_the_engine_cuts_ends_with_the_formats_error_event_and_is_recorded_aborted(
    database: tuple[str, Database], engine: tuple[str, StandInState], api_format: str
) -> None:
    url, state = engine
    state.break_streams = True
    _, opened = database
    with serve(database, url, "[openai.responses, anthropic.messages]") as reef:
        base = f"{reef}/scenarios/support"
        cut = cut_stream(
            base, api_format, secret=AGENT.secret, model=MODEL, text="hi",
            said="before its last event",
        )  # fmt: skip
        state.break_streams = False
        # The ledger writes in arrival order: once a later call is stored, so is the cut one.
        httpx.post(f"{base}/v1/messages", headers=AGENT.headers,
                   json={"model": MODEL, "max_tokens": 8,
                         "messages": [{"role": "user", "content": "after"}]})  # fmt: skip
    record = stored(opened, cut)
    assert record.aborted
    assert record.is_engine_abort
    assert record.response is not None
    assert record.response["id"] == cut
    text = f"{MODEL} answers hi"
    if api_format == RESPONSES:
        assert record.response["status"] == "in_progress"
    else:
        assert record.response["content"] == [{"type": "text", "text": text}]


def test_the_local_engine_cannot_forward_natively() -> None:
    text = DEPLOYMENT % {
        "url": "sqlite:///x.db",
        "engine": "local",
        "model": MODEL,
        "native": "[openai.responses]",
        "auth": "",
    }
    with pytest.raises(DeploymentError, match="native_formats: the local engine answers chat"):
        load_deployment(text, plugins=service_test_plugins())
