"""Publication into vLLM and SGLang: the service routes a scenario's calls to the artifact its
engine serves, and each record names the artifact that really answered.

Against the stand-ins of :mod:`doubles.engine_standins` (the engines' own endpoints and
answer shapes) on loopback, with the service in-process; ``tests/test_e2e_serve.py`` runs the
same through ``reef serve`` with a trainer. A property test drives a publisher against an
engine that fails at random and checks no answer is ever labelled with an artifact that did not
give it.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import attrs
import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

import httpx
from doubles.engine_standins import STOP_ID, StandInState, sglang_standin, vllm_standin
from hypothesis import example, given, settings, strategies as st
from starlette.testclient import TestClient

from reef.components.interface import Artifact
from reef.core.deployment import DeploymentError
from reef.core.records import InferenceRecord
from reef.engines.admin import PublicationError
from reef.engines.publisher import (
    FIRST_BACKOFF,
    PUBLISHER_STATUS_PREFIX,
    STATUS_INTERVAL,
    EngineRoute,
    Publisher,
    adapter_name,
)
from reef.engines.sglang import SglangAdapters, SglangFullWeights
from reef.engines.vllm import VllmAdapters
from reef.plugins.scenarios import load_deployment
from reef.runtime import ReefRuntime
from reef.server import ServerOptions, create_app
from reef.server.service_runtime import ServiceRuntime
from reef.server.status import status_table
from reef.storage import Database, RecordStore, ScenarioSettings
from reef.testing.service import serve_on_loopback, service_test_plugins

BASE = "tiny-llama"
SCENARIO = "support"

DEPLOYMENT = """
storage: {url: "%(url)s"}
serving: {engine: %(engine)s, url: "%(engine_url)s", model: %(model)s, native_formats: %(native)s}
scenarios:
  support:
    recipe: servicetest
    training: {component: noop}
"""


class Source:
    """An artifact store as the publisher reads it: the artifact published last."""

    def __init__(self) -> None:
        self.current: Artifact | None = None

    def latest(self) -> Artifact | None:
        return self.current


def artifact(folder: Path, number: int, *, adapter: bool = True) -> Artifact:
    """A published artifact folder: a PEFT adapter's files, or a model folder's."""
    artifact_id = f"sha256:{hashlib.sha256(str(number).encode()).hexdigest()}"
    path = folder / artifact_id.partition(":")[2]
    path.mkdir(parents=True, exist_ok=True)
    (path / ("adapter_config.json" if adapter else "config.json")).write_text("{}")
    return Artifact(artifact_id, path)


class Runtime(ServiceRuntime):
    def __init__(self, publisher: Publisher) -> None:
        self.publisher_of = publisher

    def publisher(self, scenario: str) -> Publisher | None:
        return self.publisher_of if scenario == SCENARIO else None


@attrs.define
class Loop:
    """A service in-process, its publisher and the stand-in engine it forwards to."""

    client: TestClient
    publisher: Publisher
    engine: StandInState
    source: Source
    records: RecordStore

    def call(self, *, stream: bool = False) -> dict[str, Any]:
        """One chat call; its stored record."""
        response = self.client.post(
            f"/scenarios/{SCENARIO}/v1/chat/completions",
            json={"model": "whatever", "messages": [{"role": "user", "content": "hi"}],
                  "stream": stream},
        )  # fmt: skip
        assert response.status_code == 200, response.text
        if stream:
            assert response.text.endswith("data: [DONE]\n\n")
        stored = self.records.get(response.headers["x-reef-record-id"])
        assert stored is not None
        assert stored.record is not None
        return attrs.asdict(stored.record)

    def status(self) -> dict[str, Any]:
        document = self.client.get("/reef/status").json()
        engine: dict[str, Any] = document["scenarios"][0]["engine"]
        return engine


@pytest.fixture
def loop_of(storage_url: str, storage_database: Database, tmp_path: Path) -> Iterator[Any]:
    """Makes a :class:`Loop` on a vllm or sglang stand-in, adapters or full weights."""
    stack: list[Any] = []

    def make(
        engine: Literal["vllm", "sglang"], *, full: bool = False, keep: int = 1, native: str = "[]"
    ) -> Loop:
        app, state = (vllm_standin if engine == "vllm" else sglang_standin)(BASE)
        server = serve_on_loopback(app)
        url = server.__enter__()
        stack.append(server)
        deployment = load_deployment(
            DEPLOYMENT
            % {
                "url": storage_url,
                "engine": engine,
                "engine_url": url,
                "model": BASE,
                "native": native,
            },
            plugins=service_test_plugins(),
        )
        admin = (
            VllmAdapters()
            if engine == "vllm"
            else SglangFullWeights(BASE)
            if full
            else SglangAdapters(BASE)
        )
        source = Source()
        publisher = Publisher(
            SCENARIO,
            admin,
            BASE,
            url=url,
            source=source,
            keep=keep,
            process="first",
            settings=ScenarioSettings(storage_database, SCENARIO),
        )
        stack.append(publisher)
        app = create_app(
            deployment,
            databases={storage_url: storage_database},
            plugins=service_test_plugins(),
            runtime=Runtime(publisher),
            options=ServerOptions(allow_unauthenticated=True),
        )
        client = TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000))
        client.__enter__()
        stack.append(client)
        return Loop(client, publisher, state, source, RecordStore(storage_database, SCENARIO))

    yield make
    for thing in reversed(stack):
        if isinstance(thing, Publisher):
            thing.stop()
        else:
            thing.__exit__(None, None, None)


def test_a_call_forwarded_natively_goes_to_the_published_adapter_and_its_record_names_it(
    loop_of: Any, tmp_path: Path
) -> None:
    """docs/api-formats.md#native-forwarding: a Responses or Messages call vLLM answers itself
    is routed and confirmed as a chat call is, so staleness counts it the same way."""
    loop: Loop = loop_of("vllm", native="[openai.responses, anthropic.messages]")
    first = artifact(tmp_path, 1)
    loop.source.current = first
    loop.publisher.step()
    name = adapter_name(SCENARIO, first.artifact_id)
    calls: dict[str, dict[str, Any]] = {
        "/v1/responses": {"model": "whatever", "input": "hi"},
        "/v1/messages": {"model": "whatever", "max_tokens": 8,
                         "messages": [{"role": "user", "content": "hi"}]},
    }  # fmt: skip
    for path, body in calls.items():
        for stream in (False, True):
            answered = loop.client.post(
                f"/scenarios/{SCENARIO}{path}", json={**body, "stream": stream}
            )
            assert answered.status_code == 200, answered.text
            stored = loop.records.get(answered.headers["x-reef-record-id"])
            assert stored is not None
            assert isinstance(stored.record, InferenceRecord)
            assert stored.record.artifact_id == first.artifact_id
            assert stored.record.response is not None
            assert stored.record.response["model"] == name
    assert [body["model"] for _, body in loop.engine.received] == [name] * 4
    assert "/v1/chat/completions" not in loop.engine.calls


def test_vllm_adapters_are_loaded_and_each_record_names_the_one_that_answered(
    loop_of: Any, tmp_path: Path
) -> None:
    loop: Loop = loop_of("vllm")
    # Before the first publication the base model answers: no artifact to name.
    assert loop.call()["artifact_id"] is None
    first = artifact(tmp_path, 1)
    loop.source.current = first
    loop.publisher.step()
    name = adapter_name(SCENARIO, first.artifact_id)
    assert loop.engine.adapters == {name: str(first.path)}
    record = loop.call()
    assert record["artifact_id"] == first.artifact_id
    assert record["response"]["model"] == name  # vLLM names the adapter that answered
    streamed = loop.call(stream=True)
    assert streamed["artifact_id"] == first.artifact_id
    second = artifact(tmp_path, 2)
    loop.source.current = second
    loop.publisher.step()
    assert loop.call()["artifact_id"] == second.artifact_id
    # keep=1 (max_staleness 0): no trainer trains the first adapter's data any more.
    assert set(loop.engine.adapters) == {adapter_name(SCENARIO, second.artifact_id)}
    status = loop.status()
    assert status["served_artifact"] == second.artifact_id
    assert status["publications"] == 2
    assert status["failures"] == 0
    assert status["unlabelled_answers"] == {"base_model_answered": 1}
    table = status_table(loop.client.get("/reef/status").json())
    assert f"{SCENARIO}: vllm serves {second.artifact_id} (2 published, 0 failed" in table


def test_adapters_stay_loaded_while_a_trainer_may_still_train_their_data(
    loop_of: Any, tmp_path: Path
) -> None:
    loop: Loop = loop_of("sglang", keep=3)  # max_staleness 2
    published = [artifact(tmp_path, number) for number in range(1, 6)]
    for current in published:
        loop.source.current = current
        loop.publisher.step()
        record = loop.call()
        assert record["artifact_id"] == current.artifact_id
        name = adapter_name(SCENARIO, current.artifact_id)
        assert record["response"]["model"] == f"{BASE}:{name}"  # SGLang repeats the request's
    assert set(loop.engine.adapters) == {
        adapter_name(SCENARIO, a.artifact_id) for a in published[-3:]
    }
    assert loop.engine.calls["/unload_lora_adapter"] == 2


def test_a_failed_publication_is_retried_and_never_labels_what_did_not_answer(
    loop_of: Any, tmp_path: Path
) -> None:
    loop: Loop = loop_of("vllm")
    first, second = artifact(tmp_path, 1), artifact(tmp_path, 2)
    loop.source.current = first
    loop.publisher.step()
    loop.engine.refuse_loads(2)  # the engine is down for two loads
    loop.source.current = second
    loop.publisher.step()
    # Looked at at once, in-process: the service's status and calls below may take longer
    # than the first pause on a loaded machine.
    retry_in = loop.publisher.status()["retry_in_seconds"]
    loop.publisher.step()  # within the pause: not tried again
    assert loop.engine.calls["/v1/load_lora_adapter"] == 2
    assert 0 < retry_in <= FIRST_BACKOFF
    status = loop.status()
    assert status["served_artifact"] == first.artifact_id
    assert status["pending_artifact"] == second.artifact_id
    assert status["failures"] == 1
    assert status["attempts"] == 1
    assert "500" in status["last_error"]["error"]
    # The calls still go to the first adapter, and say so.
    assert loop.call()["artifact_id"] == first.artifact_id
    for attempt in (2, 3):
        time.sleep(max(0.0, loop.status()["retry_in_seconds"]) + 0.01)
        loop.publisher.step()
        assert loop.engine.calls["/v1/load_lora_adapter"] == attempt + 1
    status = loop.status()
    assert status["served_artifact"] == second.artifact_id
    assert status["pending_artifact"] is None
    assert status["attempts"] == 0
    assert status["failures"] == 2
    assert loop.call()["artifact_id"] == second.artifact_id


def test_publications_and_their_failures_are_in_the_metrics(loop_of: Any, tmp_path: Path) -> None:
    """docs/observe.md: what this process published, what its engine refused, and how long the
    last publication took, as GET /metrics gives them."""
    parser = pytest.importorskip("prometheus_client.parser")
    loop: Loop = loop_of("vllm")
    loop.source.current = artifact(tmp_path, 1)
    loop.publisher.step()
    loop.engine.refuse_loads(1)
    loop.source.current = artifact(tmp_path, 2)
    loop.publisher.step()
    scraped = loop.client.get("/metrics")
    assert scraped.status_code == 200, scraped.text
    found = {
        sample.name: sample.value
        for family in parser.text_string_to_metric_families(scraped.text)
        for sample in family.samples
        if sample.labels == {"scenario": SCENARIO}
    }
    assert found["reef_publications_total"] == 1
    assert found["reef_publication_failures_total"] == 1
    assert found["reef_publication_last_duration_seconds"] > 0
    assert found["reef_publication_duration_seconds_count"] == 1  # the one that succeeded
    assert found["reef_publication_duration_seconds_sum"] > 0


def test_an_adapter_another_process_loaded_is_taken_as_loaded(loop_of: Any, tmp_path: Path) -> None:
    loop: Loop = loop_of("vllm")
    first = artifact(tmp_path, 1)
    loop.engine.adapters[adapter_name(SCENARIO, first.artifact_id)] = str(first.path)
    loop.source.current = first
    loop.publisher.step()
    assert loop.status()["failures"] == 0
    assert loop.call()["artifact_id"] == first.artifact_id


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_adapters_an_earlier_process_loaded_are_unloaded_after_a_restart(
    loop_of: Any, tmp_path: Path, engine: Literal["vllm", "sglang"]
) -> None:
    loop: Loop = loop_of(engine, keep=2)
    published = [artifact(tmp_path, number) for number in (1, 2, 3)]
    for current in published:
        loop.source.current = current
        loop.publisher.step()
    names = [adapter_name(SCENARIO, a.artifact_id) for a in published]
    assert list(loop.engine.adapters) == names[1:]
    # Adapters Reef did not name, and another scenario's (its name starting the same), stay.
    others = {
        "sql-expert": str(tmp_path),
        adapter_name(f"{SCENARIO}-eu", published[0].artifact_id): str(published[0].path),
    }
    loop.engine.adapters.update(others)
    loop.publisher.stop()  # `reef serve` stops; what it loaded stays loaded
    fourth = artifact(tmp_path, 4)
    loop.source.current = fourth  # a trainer published meanwhile
    asked = loop.engine.calls["/v1/models"]
    restarted = Publisher(
        SCENARIO, loop.publisher.admin, BASE, url=loop.publisher.url, source=loop.source, keep=2
    )
    try:
        restarted.step()
        kept = [names[2], adapter_name(SCENARIO, fourth.artifact_id)]
        assert set(loop.engine.adapters) == {*kept, *others}
        assert restarted.status()["loaded_adapters"] == kept
        restarted.step()  # asked once per process
        assert loop.engine.calls["/v1/models"] == asked + 1
    finally:
        restarted.stop()


def test_an_engine_that_cannot_list_its_adapters_is_asked_again(tmp_path: Path) -> None:
    source = Source()
    publisher = Publisher(SCENARIO, VllmAdapters(), BASE, url="http://127.0.0.1:9", source=source)
    try:
        publisher.step()  # nothing listens there
        assert "GET /v1/models" in publisher.status()["last_error"]["error"]
        assert not publisher._adopted
        publisher._adopt_at = 0.0  # the pause after the failure is over
        publisher.step()
        assert publisher._adopt_failures == 2
    finally:
        publisher.stop()


@pytest.mark.parametrize(
    ("engine", "refusal"),
    [
        ("vllm", (404, "NotFoundError")),
        # SGLang answers 400, not 404 (python/sglang/srt/lora/lora_registry.py).
        ("sglang", (400, "The following requested LoRA adapters are not loaded")),
    ],
)
def test_an_engine_that_restarted_without_the_artifact_gets_it_again(
    loop_of: Any, tmp_path: Path, engine: str, refusal: tuple[int, str]
) -> None:
    loop: Loop = loop_of(engine)
    first = artifact(tmp_path, 1)
    loop.source.current = first
    loop.publisher.step()
    loop.engine.adapters.clear()  # the engine restarted: its adapters are gone
    response = loop.client.post(
        f"/scenarios/{SCENARIO}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}]},
    )
    assert response.status_code == refusal[0]  # the engine's answer, passed on
    assert refusal[1] in json.dumps(response.json()["engine"])
    assert loop.status()["lost"] == 1
    assert loop.call()["artifact_id"] is None  # the base model answers meanwhile, unnamed
    loop.publisher.step()
    assert loop.call()["artifact_id"] == first.artifact_id
    loads = "/v1/load_lora_adapter" if engine == "vllm" else "/load_lora_adapter"
    assert loop.engine.calls[loads] == 2


def test_another_refusal_of_sglang_is_not_taken_for_a_lost_adapter(
    loop_of: Any, tmp_path: Path
) -> None:
    loop: Loop = loop_of("sglang")
    loop.source.current = artifact(tmp_path, 1)
    loop.publisher.step()
    response = loop.client.post(
        f"/scenarios/{SCENARIO}/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "hi"}], "temperature": -1},
    )
    assert response.status_code == 400
    assert loop.status()["lost"] == 0


def test_status_says_what_each_process_serving_the_scenario_published(
    loop_of: Any, storage_database: Database, tmp_path: Path
) -> None:
    loop: Loop = loop_of("vllm")
    settings = ScenarioSettings(storage_database, SCENARIO)
    first = artifact(tmp_path, 1)
    loop.source.current = first
    loop.publisher.step()
    loop.publisher.report()
    other = Publisher(
        SCENARIO,
        VllmAdapters(),
        BASE,
        url=loop.publisher.url,
        source=loop.source,
        process="second",
        settings=settings,
    )
    try:
        loop.engine.adapters.clear()  # so that the second process loads it too, and is refused
        loop.engine.refuse_loads(1)
        other.step()
        other.report()
        engine = loop.status()
        assert engine["process"] == "first"
        processes = {p["process"]: p for p in engine["processes"]}
        assert set(processes) == {"first", "second"}
        assert processes["first"]["served_artifact"] == first.artifact_id
        assert processes["first"]["publications"] == 1
        assert processes["second"]["served_artifact"] is None
        assert processes["second"]["pending_artifact"] == first.artifact_id
        assert processes["second"]["failures"] == 1
        assert "500" in processes["second"]["last_error"]["error"]
        assert not processes["second"]["gone"]
        table = status_table(loop.client.get("/reef/status").json())
        assert (
            f"{SCENARIO}: process first (this one): serves {first.artifact_id} (1 published,"
            " 0 failed; pending -)"
        ) in table
        assert (
            f"{SCENARIO}: process second: serves - (0 published, 1 failed; pending"
            f" {first.artifact_id}); last error: vLLM refused adapter"
        ) in table
        written = settings.get(f"{PUBLISHER_STATUS_PREFIX}second")
        other.report()  # nothing changed: not written again before the interval
        assert settings.get(f"{PUBLISHER_STATUS_PREFIX}second") == written
    finally:
        other.stop()
    # A process that stops leaves the status.
    assert [p["process"] for p in loop.status()["processes"]] == ["first"]
    # One that ended without stopping shows as gone; the next process to start forgets it.
    silent = 4 * STATUS_INTERVAL
    crashed = {"served_artifact": first.artifact_id, "updated_at": time.time() - silent}
    settings.set(f"{PUBLISHER_STATUS_PREFIX}crashed", crashed)
    shown = {p["process"]: p for p in loop.status()["processes"]}
    assert shown["crashed"]["gone"]
    assert shown["crashed"]["silent_seconds"] >= silent
    assert "process crashed: gone (silent" in status_table(loop.client.get("/reef/status").json())
    third = Publisher(
        SCENARIO, VllmAdapters(), BASE, url="http://unused", source=Source(), process="third",
        settings=settings,
    )  # fmt: skip
    third.report()
    third.stop()
    assert [p["process"] for p in loop.status()["processes"]] == ["first"]


def test_sglang_full_weights_name_the_weight_version_that_answered(
    loop_of: Any, tmp_path: Path
) -> None:
    loop: Loop = loop_of("sglang", full=True)
    first = artifact(tmp_path, 1, adapter=False)
    loop.source.current = first
    loop.publisher.step()
    assert loop.engine.weights_path == str(first.path)
    assert loop.engine.weight_version == first.artifact_id
    record = loop.call()
    assert record["artifact_id"] == first.artifact_id
    assert record["response"]["metadata"] == {"weight_version": first.artifact_id}
    assert record["response"]["model"] == BASE
    # A streamed answer carries no weight version: labelled as no swap ran meanwhile.
    assert loop.call(stream=True)["artifact_id"] == first.artifact_id
    assert loop.engine.adapters == {}
    # SGLang restarted on its own weights: the answer says so, and they are published again.
    loop.engine.weight_version = "default"
    assert loop.call()["artifact_id"] is None
    assert loop.status()["lost"] == 1
    loop.publisher.step()
    assert loop.call()["artifact_id"] == first.artifact_id


def test_an_answer_that_names_other_weights_is_left_unlabelled_and_counted(
    tmp_path: Path,
) -> None:
    source = Source()
    full = Publisher(SCENARIO, SglangFullWeights(BASE), BASE, url="http://unused", source=source)
    adapters = Publisher(SCENARIO, VllmAdapters(), BASE, url="http://unused", source=source)
    try:
        route = EngineRoute("sha256:" + "1" * 64, "reef-support-1111111111111111", 0)
        assert adapters.answered(route, {"model": "reef-support-2222222222222222"}) is None
        assert full.answered(route, {"metadata": {"weight_version": "default"}}) is None
        swapping = attrs.evolve(route, switch=1)  # taken while a swap ran
        assert full.answered(swapping, {"model": BASE}) is None
        assert adapters.status()["unlabelled_answers"] == {"model_differs": 1}
        assert full.status()["unlabelled_answers"] == {
            "unknown_weight_version": 1,
            "weights_swapped": 1,
        }
    finally:
        full.stop()
        adapters.stop()


def test_an_answer_from_new_weights_before_the_swap_is_acknowledged_names_them(
    tmp_path: Path,
) -> None:
    """SGLang swaps its weights, then replies to the load: a call answered in between names
    the new weight version, which is Reef's artifact, not weights of unknown origin."""
    during: list[str | None] = []

    class SwapsThenReplies(SglangFullWeights):
        def load(self, client: httpx.Client, name: str, path: str, artifact_id: str) -> None:
            route = publisher.route()
            during.append(publisher.answered(route, {"metadata": {"weight_version": artifact_id}}))

    source = Source()
    publisher = Publisher(
        SCENARIO, SwapsThenReplies(BASE), BASE, url="http://unused", source=source
    )
    try:
        first = artifact(tmp_path, 1, adapter=False)
        source.current = first
        publisher.step()
        second = artifact(tmp_path, 2, adapter=False)
        source.current = second
        publisher.step()
        assert during == [first.artifact_id, second.artifact_id]
        status = publisher.status()
        assert status["unlabelled_answers"] == {}
        assert status["lost"] == 0
    finally:
        publisher.stop()


def test_a_trainer_waits_for_the_engine_to_serve_what_it_published(
    loop_of: Any, tmp_path: Path
) -> None:
    loop: Loop = loop_of("vllm")
    loop.publisher.start()
    first = artifact(tmp_path, 1)
    loop.source.current = first
    assert loop.publisher.serve(first, timeout=30) == first
    loop.engine.refuse_loads(1000)
    second = artifact(tmp_path, 2)
    loop.source.current = second
    # Refused: after the timeout, the artifact that still serves.
    assert loop.publisher.serve(second, timeout=0.3) == first


@pytest.mark.parametrize(
    ("serving", "problem"),
    [
        ("{engine: vllm, model: m}", "engine vllm needs url"),
        ('{engine: sglang, url: "http://h:1"}', "engine sglang needs model"),
        ('{engine: "http://h:1/v1", url: "http://h:2"}', "url and artifacts_path are for"),
    ],
)
def test_a_publishing_engine_is_checked_when_the_deployment_loads(
    serving: str, problem: str
) -> None:
    text = f"serving: {serving}\nscenarios: {{s: {{recipe: servicetest}}}}\n"
    with pytest.raises(DeploymentError, match=problem):
        load_deployment(text, plugins=service_test_plugins())


@pytest.mark.parametrize(
    ("training", "problem"),
    [
        (
            '{component: "reef.components.local.component:LocalComponent",'
            " options: {state_dir: %(state)s, model_path: %(state)s}}",
            "vLLM takes trained weights at run time as LoRA adapters only: no route of its"
            " server loads full weights from a folder .*; set training.options.lora to train a"
            " LoRA adapter, or serve the scenario with engine sglang, which loads full weights"
            " from disk",
        ),
        ("{component: noop}", "set training.component to local"),
        (
            '[{component: "reef.components.local.component:LocalComponent", name: weights,'
            " options: {state_dir: %(state)s, model_path: %(state)s, lora: {r: 4}}},"
            " {component: noop, serves: true}]",
            r"set training.component to local \(with several components, on the entry that"
            r" sets serves: true\)",
        ),
    ],
)
def test_the_runtime_refuses_weights_the_engine_cannot_take(
    tmp_path: Path, training: str, problem: str
) -> None:
    pytest.importorskip("torch")
    text = (
        f'storage: {{url: "sqlite:///{tmp_path}/reef.db"}}\n'
        'serving: {engine: vllm, url: "http://127.0.0.1:9", model: base}\n'
        f"scenarios: {{s: {{recipe: servicetest, training: {training}}}}}\n"
    ) % {"state": tmp_path}
    plugins = service_test_plugins()
    deployment = load_deployment(text, plugins=plugins)
    with pytest.raises(ValueError, match=problem):
        ReefRuntime(deployment, plugins=plugins, databases={}, run_trainers=False)


# -- the invariant, against an engine that fails at random ------------------------------------


@attrs.define
class FlakyAdmin:
    """An engine in memory: loads fail when told; a call reaches an adapter only while it is
    loaded, and the answer names the model that answered (as vLLM's does)."""

    weights: Literal["adapter", "full"] = "adapter"
    kind: str = "flaky"
    loaded: dict[str, str] = attrs.field(factory=dict)  # name -> artifact id
    fail_next: bool = False

    def load(self, client: httpx.Client, name: str, path: str, artifact_id: str) -> None:
        if self.fail_next:
            self.fail_next = False
            raise PublicationError("refused")
        self.loaded[name] = artifact_id

    def unload(self, client: httpx.Client, name: str) -> None:
        self.loaded.pop(name, None)

    def adapters(self, client: httpx.Client) -> list[str]:
        return list(self.loaded)

    def model(self, name: str) -> str:
        return name

    def lost(self, status: int, body: dict[str, Any] | None) -> bool:
        return status == 404

    def call(self, model: str) -> tuple[str | None, dict[str, Any]]:
        """The artifact that really answers a call naming ``model``, and the answer."""
        artifact_id = self.loaded.get(model)
        return artifact_id, {"model": model if artifact_id is not None else BASE}


@settings(max_examples=100)
# A call routed to an adapter that a publication then unloads: the engine answers with another.
@example(steps=["publish", "step", "publish", "call_after_step"], keep=1)
@given(
    steps=st.lists(
        st.sampled_from(["publish", "refuse", "step", "call", "call_after_step"]), max_size=40
    ),
    keep=st.integers(1, 3),
)
def test_no_answer_is_labelled_with_an_artifact_that_did_not_give_it(
    steps: list[str], keep: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("artifacts")
    admin = FlakyAdmin()
    source = Source()
    publisher = Publisher(SCENARIO, admin, BASE, url="http://unused", source=source, keep=keep)
    published = 0
    try:
        for action in steps:
            if action == "publish":
                published += 1
                source.current = artifact(folder, published)
            elif action == "refuse":
                admin.fail_next = True
            elif action == "step":
                publisher._retry_at = None  # no waiting out the pause in a property test
                publisher.step()
            else:
                route = publisher.route()
                if action == "call_after_step":
                    publisher.step()  # publication (and unloading) while the call runs
                model = BASE if route is None else route.model
                truth, body = admin.call(model)
                labelled = publisher.answered(route, body)
                assert labelled is None or labelled == truth
                assert len(admin.loaded) <= keep
        counts = publisher.status()["unlabelled_answers"]
        assert all(count > 0 for count in counts.values())
        json.dumps(publisher.status())
    finally:
        publisher.stop()


@pytest.mark.parametrize(("engine", "stream"), [("vllm", False), ("vllm", True), ("sglang", False)])
def test_the_tokens_each_engine_sampled_are_recorded_and_trained_as_they_are(
    loop_of: Any, engine: str, stream: bool
) -> None:
    """vLLM and SGLang answer ``return_token_ids`` with the ids they sampled (their stand-ins
    answer as their serving code does): the service asks for them on every call, records them,
    gives the client only what it asked for, and the sample built from the record trains those
    ids as they are, on 100 random calls."""
    from reef.components.local.byte_tokenizer import ByteTokenizer
    from reef.core.atif import trajectory_to_json
    from reef.core.atif_build import trajectory_from_records
    from reef.core.chat_rendering import ChatRenderer

    loop: Loop = loop_of(engine)
    renderer = ChatRenderer(ByteTokenizer())
    rng = random.Random(7)
    for _number in range(100):
        text = "".join(rng.choices("abc é東🙂\n<>", k=rng.randint(1, 12)))
        asked = rng.random() < 0.3
        request: dict[str, Any] = {"messages": [{"role": "user", "content": text}]}
        if asked:
            request["return_token_ids"] = True
        response = loop.client.post(
            f"/scenarios/{SCENARIO}/v1/chat/completions", json={**request, "stream": stream}
        )
        assert response.status_code == 200, response.text
        # The client gets token ids only when it asked, and log probabilities never unasked.
        assert ("token_ids" in response.text) == asked
        assert ('"logprob"' in response.text) is False
        stored = loop.records.get(response.headers["x-reef-record-id"])
        assert stored is not None
        assert stored.record is not None
        record: InferenceRecord = stored.record
        reply = record.reply_messages[0]["content"]
        sampled = [*reply.encode(), STOP_ID]
        trajectory = trajectory_to_json(
            trajectory_from_records([record], trajectory_id="t", keep_tokens=True)
        )
        metrics = trajectory["steps"][-1].get("metrics") or {}
        assert metrics["completion_token_ids"] == sampled
        assert metrics["prompt_token_ids"] == list(text.encode())
        rendered = renderer.render_sample(trajectory)
        (sequence,) = rendered.sequences
        trained = [t for t, m in zip(sequence.token_ids, sequence.loss_mask, strict=True) if m]
        assert trained == sampled
        # The stand-in's prompt is not the template's: counted, and the engine's trains.
        assert rendered.prompt_mismatches == 1
        assert list(sequence.token_ids[: len(text.encode())]) == list(text.encode())


class Publishing:
    """A component whose every publication is a new adapter folder, which the engine can
    load only while :attr:`loadable` (else the folder has no ``adapter_config.json``: vLLM
    answers 404, the publication fails)."""

    def __init__(self, folder: Path, source: Source) -> None:
        self.name = "c"
        self.folder = folder
        self.source = source
        self.loadable = True
        self.submitted: list[str] = []
        self.published = 0

    def submit(self, data: Any, parameters: Any = None) -> Any:
        from reef.components.interface import JobHandle

        self.submitted.append(data.id)
        return JobHandle(data.id, self.name)

    def poll(self, handle: Any) -> Any:
        from reef.core.job_data import JobOutcome

        return JobOutcome(handle.job_id, self.name, "finished")

    def wait(self, handle: Any, timeout: float | None = None) -> Any:
        return self.poll(handle)

    def publish(self) -> Artifact:
        self.published += 1
        made = artifact(self.folder, self.published, adapter=self.loadable)
        self.source.current = made
        return made

    def close(self) -> None:
        pass


def test_a_trainer_pauses_after_failed_publications_until_the_engine_takes_one(
    storage_database: Database, tmp_path: Path
) -> None:
    """The engine refuses the new adapters (a path it cannot read): after
    ``max_failed_publications`` in a row the trainer starts no job, says why in status, and
    counts the jobs it started while publication failed; once the engine takes an artifact
    it trains again."""
    from reef.core.job_data import TrajectorySample, sample_body
    from reef.runtime import PublishedComponent
    from reef.storage import NewSample, TrainerSamples
    from reef.testing.components import grouped_parts
    from reef.train.trainer import Trainer, TrainerSettings

    samples = TrainerSamples(storage_database, "s")
    samples.register_trainer("c", reads_uploads=False)

    def add_groups(first: int, count: int) -> None:
        for group in range(first, first + count):
            body = sample_body(TrajectorySample({"steps": []}, reward=0.0))
            unit = [NewSample(f"g{group}-{i}", "trajectory", body) for i in range(2)]
            samples.add_record_samples("c", unit, [f"record-{group}"])

    app, _ = vllm_standin(BASE)
    source = Source()
    inner = Publishing(tmp_path / "artifacts", source)
    with serve_on_loopback(app) as url:
        publisher = Publisher("s", VllmAdapters(), BASE, url=url, source=source, keep=1)
        publisher.start()
        component = PublishedComponent(inner, publisher, 0.5, max_failed=2)
        trainer = Trainer(
            "s",
            "c",
            database=storage_database,
            build=grouped_parts(component),  # type: ignore[arg-type]
            settings=TrainerSettings(poll_interval=0.05),
        )
        trainer.start()
        try:
            wait_for(lambda: component.publication().served is not None)  # the first took
            inner.loadable = False  # the engine cannot read the next adapters
            add_groups(0, 6)
            wait_for(lambda: trainer.paused is not None)
            submitted = len(inner.submitted)
            assert submitted == 2  # two jobs whose publications failed, then no more
            assert component.publication().failed_in_a_row == 2
            assert trainer.job_counts["jobs_while_publication_failed"] == 1
            snapshot = trainer.snapshot(trainer.parts.pipeline, None, "x")  # type: ignore[union-attr]
            assert "did not take the last 2 published artifacts" in snapshot["paused"]
            time.sleep(0.5)
            assert len(inner.submitted) == submitted  # paused: nothing else trains
            # The engine can read the newest adapter now: it takes it, training goes on.
            (Path(source.current.path) / "adapter_config.json").write_text("{}")  # type: ignore[union-attr]
            inner.loadable = True
            wait_for(lambda: component.publication().failed_in_a_row == 0)
            add_groups(6, 4)
            wait_for(lambda: len(inner.submitted) > submitted)
            assert trainer.paused is None
        finally:
            trainer.stop(30)
            publisher.stop()


def wait_for(condition: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the condition never held")
        time.sleep(0.05)
