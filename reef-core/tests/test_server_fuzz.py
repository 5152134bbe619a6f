"""Fuzzing every route of the OpenAPI document with hypothesis: bodies drawn from each route's
documented schema (and from arbitrary JSON), path parameters from known and unknown names, the
store holding samples and a job for the read routes to find. No answer is a 5xx, and a refused
request (4xx) leaves every table of the store as it was."""

from __future__ import annotations

import json
import string
from collections.abc import Iterator
from typing import Any

import pytest

# The server extra (reef-core[server]); without it reef-core's own tests skip this module.
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from hypothesis import HealthCheck, given, settings, strategies as st
from sqlalchemy import func, select
from starlette.testclient import TestClient

from reef.core.job_data import TaskSample, TrajectorySample, sample_body
from reef.storage import (
    Database,
    JobHistory,
    NewSample,
    SampleOfJob,
    StaleSamples,
    TrainerSamples,
    open_database,
)
from reef.storage.tables import metadata
from reef.testing.engines import scripted_engine
from reef.testing.service import ServiceToken, auth_section, serve_on_loopback, service_app

ADMIN = ServiceToken("admin", ("infer", "feedback", "admin"))
DEPLOYMENT = (
    """
storage: {url: "%(url)s"}
serving: {engine: "%(engine)s/v1"}
"""
    + auth_section(ADMIN)
    + """scenarios:
  support: {recipe: servicetest, training: {component: noop}}
  billing:
    recipe: servicetest
    pipeline: {sample2job: {class: "reef.testing.service:AutoOnlyJobData"}}
    training: {component: noop}
"""
)
HEADERS = {**ADMIN.headers, "x-reef-scenario": "support"}

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
NAMES = st.sampled_from(["support", "billing", "nope", "x", "t1", "a/b"]) | st.text(
    string.ascii_letters + string.digits + "-_", min_size=1, max_size=8
)


def from_schema(schema: dict[str, Any], components: dict[str, Any], depth: int = 0) -> Any:
    """A strategy for values of a JSON Schema as the document writes them."""
    if "$ref" in schema:
        return from_schema(components[schema["$ref"].rsplit("/", 1)[1]], components, depth)
    if depth > 4 or not schema:
        return JSON_VALUES
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([from_schema(s, components, depth + 1) for s in schema["anyOf"]])
    kind = schema.get("type")
    if kind == "object":
        properties = schema.get("properties")
        if properties is None:
            return st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=3)
        required = set(schema.get("required", []))
        return st.fixed_dictionaries(
            {
                k: from_schema(v, components, depth + 1)
                for k, v in properties.items()
                if k in required
            },
            optional={
                k: from_schema(v, components, depth + 1)
                for k, v in properties.items()
                if k not in required
            },
        )
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {}), components, depth + 1), max_size=3)
    simple = {
        "string": st.sampled_from(["support", "t1", "", "inf-1"]) | st.text(max_size=10),
        "integer": st.integers(-3, 10**6),
        "number": st.floats(allow_nan=False, allow_infinity=False),
        "boolean": st.booleans(),
        "null": st.none(),
    }
    return simple.get(kind, JSON_VALUES)


def row_counts(database: Database) -> dict[str, int]:
    with database.read() as connection:
        return {
            table.name: int(
                connection.execute(select(func.count()).select_from(table)).scalar_one()
            )
            for table in metadata.sorted_tables
        }


def store_samples(database: Database) -> None:
    """Samples for the console's read routes to find, under names the fuzzer draws (``t1``,
    ``a/b``): one trained by a job of the history, stale, in the manual buffer, and a task."""
    samples = TrainerSamples(database, "support")
    samples.register_trainer("noop", reads_uploads=True)
    trajectory = TrajectorySample({"steps": [{"source": "user", "message": "hi"}]}, reward=0.5)
    samples.add_samples(
        "noop",
        [NewSample("t1", "trajectory", sample_body(trajectory)),
         NewSample("a/b", "task", sample_body(TaskSample("a/b", {"n": 1})))],
    )  # fmt: skip
    samples.insert_into_manual_buffer("noop", ["a/b"])
    samples.commit_submission("noop", "job-1", ["t1"])
    history = JobHistory(database, "support")
    history.submitted("noop", "job-1", [SampleOfJob("t1", True, 0.5)])
    history.ended("noop", "job-1", "finished", {"loss": 0.25})
    StaleSamples(database, "support").replace("noop", ["a/b"])


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Database]]:
    url = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'reef.db'}"
    database = open_database(url)
    with serve_on_loopback(scripted_engine()) as engine:
        app = service_app(DEPLOYMENT % {"url": url, "engine": engine}, url, database)
        with TestClient(app) as client:
            store_samples(database)
            found = client.get("/reef/scenarios/support/samples/a/b", headers=HEADERS)
            assert found.json()["sample"]["stale_for"] == ["noop"], found.text
            yield client, database
    database.dispose()


Operation = tuple[str, str, dict[str, Any] | None, dict[str, Any], list[dict[str, Any]]]


def operations(client: TestClient) -> list[Operation]:
    document = client.get("/openapi.json").json()
    components = document["components"]["schemas"]
    found = []
    for path, ops in document["paths"].items():
        for method, op in ops.items():
            body = op.get("requestBody")
            schema = body["content"]["application/json"]["schema"] if body else None
            query = [p for p in op.get("parameters", []) if p["in"] == "query"]
            found.append((method.upper(), path, schema, components, query))
    return found


def query_value(value: Any) -> str:
    """A drawn value as a query string writes it (JSON's true/false for booleans)."""
    return json.dumps(value) if isinstance(value, bool) else str(value)


def queries(parameters: list[dict[str, Any]], components: dict[str, Any]) -> Any:
    """Query strings of the documented parameters (values drawn from their schemas or any
    text), now and then with a parameter the route does not have."""
    known = st.fixed_dictionaries(
        {},
        optional={
            p["name"]: from_schema(p["schema"], components).map(query_value) | st.text(max_size=6)
            for p in parameters
        },
    )
    unknown = st.dictionaries(st.sampled_from(["x", "limit ", "Kind"]), st.text(max_size=4))
    return st.one_of(known, st.tuples(known, unknown).map(lambda both: {**both[1], **both[0]}))


@settings(
    max_examples=250,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_no_route_answers_5xx_and_refusals_store_nothing(
    service: tuple[TestClient, Database], data: st.DataObject
) -> None:
    client, database = service
    method, path, schema, components, parameters = data.draw(st.sampled_from(operations(client)))
    url = path
    for name in ("scenario", "item_id", "sample_id"):
        url = url.replace("{" + name + "}", data.draw(NAMES, label=name))
    body = None
    if schema is not None:
        body = data.draw(from_schema(schema, components) | JSON_VALUES, label="body")
    query = data.draw(queries(parameters, components), label="query") if parameters else None
    before = row_counts(database)
    answer = client.request(method, url, json=body, params=query, headers=HEADERS)
    assert answer.status_code < 500, (method, url, query, body, answer.text)
    if 400 <= answer.status_code < 500:
        problems = answer.json()["problems"]
        assert problems
        assert all(p["field"] and p["reason"] for p in problems)
        assert row_counts(database) == before, (method, url, query, body, answer.text)
