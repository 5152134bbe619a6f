"""Every name a route takes is checked once, as a name, before anything acts on it: the path's
scenario and item id, a body's task name, item id, trainer, report and instruction ids, a
query's trainer. A bad one is a 400 naming the field; it never reaches the stores or the task
folders, and it never marks the stores unable to write. Through Starlette's TestClient against
real stores and the generator service (bubblewrap) with two scenarios."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient

from reef.core.atif import trajectory_to_json
from reef.core.atif_build import trajectory_from_records
from reef.core.records import InferenceRecord
from reef.server.app import API_ROUTES
from reef.storage import Database
from reef.testing.service import ServiceToken, auth_section, serve_on_loopback, service_app
from reef.testing.task_engines import hint_policy
from reef.testing.tasks import arithmetic_task

ADMIN_TOKEN = ServiceToken("admin", ("infer", "feedback", "admin"))
ALPHA_TOKEN = ServiceToken("alpha-admin", ("infer", "feedback", "admin"), ("alpha",))
ADMIN, ALPHA = ADMIN_TOKEN.headers, ALPHA_TOKEN.headers

DEPLOYMENT = (
    """
storage: {url: "%(url)s"}
serving: {engine: "%(engine)s/v1"}
%(generator)s"""
    + auth_section(ADMIN_TOKEN, ALPHA_TOKEN)
    + """scenarios:
  alpha:
    recipe: servicetest
    training: {component: noop}
  beta:
    recipe: servicetest
    training: {component: noop}
"""
)

#: Names a route must refuse, each for another part of the rule.
BAD_NAMES = {
    "parent": "..",
    "dots": "a..b",
    "backslash": "a\\b",
    "control": "a\x01b",
    "newline": "a\nb",
    "long": "n" * 201,  # one beyond the longest name
}

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup does)"
)


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    with serve_on_loopback(hint_policy()) as url:
        yield url


def make_client(
    storage_url: str, storage_database: Database, engine: str, tasks_root: Path | None
) -> TestClient:
    generator = ""
    if tasks_root is not None:
        limits = "{timeout_seconds: 20, memory_mb: 256}"
        generator = f'generator: {{tasks_root: "{tasks_root}", containers: {limits}}}\n'
    text = DEPLOYMENT % {"url": storage_url, "engine": engine, "generator": generator}
    return TestClient(service_app(text, storage_url, storage_database))


@pytest.fixture
def client(storage_url: str, storage_database: Database, engine: str) -> Iterator[TestClient]:
    with make_client(storage_url, storage_database, engine, None) as test_client:
        yield test_client


def stores_can_write(client: TestClient) -> bool:
    service = client.app.state.service  # type: ignore[attr-defined]
    return all(health.reason is None for health in service.health.values())


def refused_at(answer: Any, field: str) -> None:
    assert answer.status_code == 400, answer.text
    problem = answer.json()["problems"][0]
    assert problem["field"] == field, problem
    assert "a name is 1 to" in problem["reason"], problem


def atif(trajectory_id: str | None = None, session_id: str = "s") -> dict[str, Any]:
    record = InferenceRecord(
        "c1",
        "alpha",
        {"messages": [{"role": "user", "content": "hello"}]},
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]},
    )
    trajectory = trajectory_from_records([record], trajectory_id=trajectory_id)
    return {**trajectory_to_json(trajectory), "session_id": session_id}


def test_every_named_path_parameter_of_every_route_is_checked(client: TestClient) -> None:
    """The route table checks each path parameter (but a ``{sample_id:path}``, an id the
    service made) as a name before its handler runs: a route added later is checked too."""
    checked = set()
    for route in API_ROUTES:
        named = re.findall(r"\{([a-z_]+)\}", route.path)  # not {sample_id:path}
        for parameter in named:
            for kind, bad in BAD_NAMES.items():
                values = {p: "alpha" if p == "scenario" else "x" for p in named}
                values[parameter] = bad
                url = route.path
                for name, value in values.items():
                    # Encoded, so the client sends ".." as it is instead of resolving it.
                    url = url.replace(f"{{{name}}}", quote(value, safe="").replace(".", "%2E"))
                url = url.replace("{sample_id:path}", "s")
                headers = {**ADMIN, "content-type": "application/json"}
                answer = client.request(route.method, url, headers=headers, content=b"{}")
                assert answer.status_code == 400, (route.path, kind, answer.text)
                assert answer.json()["problems"][0]["field"] == parameter, (route.path, kind)
            checked.add((route.method, route.path))
    assert len(checked) >= 15  # every scenario route, the items' routes


def test_an_item_id_with_a_separator_is_refused_at_upload(client: TestClient) -> None:
    """An item stored under ``a/b`` could never be read or deleted by its path (the router
    splits it): refused where it is given, whether as ``id`` or as the trajectory's own id."""
    refused_at(client.post("/reef/items", json={"id": "a/b", "trajectory": atif("t")},
                           headers=ADMIN), "$.id")  # fmt: skip
    refused_at(
        client.post("/reef/items", json={"trajectory": atif("up/1")}, headers=ADMIN),
        "$.trajectory.trajectory_id",
    )
    refused_at(
        client.post("/reef/items", json={"trajectory": atif(None, "../s")}, headers=ADMIN),
        "$.trajectory.session_id",
    )
    assert client.get("/reef/items/a", headers=ADMIN).status_code == 404  # nothing stored
    good = client.post("/reef/items", json={"trajectory": atif("up-1")}, headers=ADMIN)
    assert good.status_code == 201
    assert client.get("/reef/items/up-1", headers=ADMIN).status_code == 200
    assert client.delete("/reef/items/up-1", headers=ADMIN).status_code == 200


def test_names_in_bodies_and_queries_are_checked(client: TestClient) -> None:
    base = "/reef/scenarios/alpha"
    refused_at(
        client.post(f"{base}/instructions", json={"request_id": "../x"}, headers=ADMIN),
        "$.request_id",
    )
    refused_at(
        client.post(f"{base}/reports", json={"id": "a/b", "references": ["c"]}, headers=ADMIN),
        "$.id",
    )
    refused_at(
        client.post(
            f"{base}/insert_into_buffer",
            json={"sample_ids": ["s"], "trainer": "a\\b"},
            headers=ADMIN,
        ),
        "$.trainer",
    )
    refused_at(client.get(f"{base}/samples?trainer=..", headers=ADMIN), "query.trainer")
    refused_at(client.get(f"{base}/jobs?trainer=a%00b", headers=ADMIN), "query.trainer")
    assert stores_can_write(client)


@needs_bwrap
def test_a_generator_route_takes_a_task_name_never_a_path(
    storage_url: str, storage_database: Database, engine: str, tmp_path: Path
) -> None:
    """An admin of ``alpha`` named ``../beta/<task>`` (or an absolute folder holding a digest
    file) and ran, and read the output of, ``beta``'s task: ``task_name`` is a name, refused
    with a 400 before any folder is looked at; a 5 KiB one too, which the stores took for a
    full disk (503 on every store)."""
    with make_client(storage_url, storage_database, engine, tmp_path / "tasks") as client:
        task = arithmetic_task("add-17-25", 17, 25)
        staged = client.post(
            "/reef/scenarios/beta/generator/tasks", json={"task": task}, headers=ADMIN
        )
        assert staged.status_code == 200, staged.text
        beta_folder = tmp_path / "tasks" / "beta" / "add-17-25"
        assert beta_folder.is_dir()
        # alpha's own folder exists, so alpha/../beta resolves on disk.
        own = client.post(
            "/reef/scenarios/alpha/generator/tasks",
            json={"task": arithmetic_task("add-1-2", 1, 2)},
            headers=ALPHA,
        )
        assert own.status_code == 200, own.text
        for route in ("tasks", "verify", "play"):
            for name in ("../beta/add-17-25", str(beta_folder), "x" * 5000):
                body: dict[str, Any] = {"task_name": name}
                if route == "verify":
                    body["oracle"] = True
                answer = client.post(
                    f"/reef/scenarios/alpha/generator/{route}", json=body, headers=ALPHA
                )
                refused_at(answer, "$.task_name")
        assert stores_can_write(client)
        chat = client.post(
            "/scenarios/alpha/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "What is 1 + 1?"}]},
            headers=ADMIN,
        )
        assert chat.status_code == 200, chat.text


@needs_bwrap
def test_an_error_that_is_not_the_stores_leaves_the_stores_writable(
    storage_url: str, storage_database: Database, engine: str, tmp_path: Path
) -> None:
    """A tasks root that is a file fails the staging with an OSError: a 500 of the request,
    not a 503 of the stores, and no store is marked unable to write."""
    tasks_root = tmp_path / "tasks"
    tasks_root.write_text("not a folder", encoding="utf-8")
    with make_client(storage_url, storage_database, engine, tasks_root) as client:
        client_raises = TestClient(client.app, raise_server_exceptions=False)
        answer = client_raises.post(
            "/reef/scenarios/alpha/generator/tasks",
            json={"task": arithmetic_task("add-1-2", 1, 2)},
            headers=ADMIN,
        )
        assert answer.status_code == 500, answer.text
        assert answer.json()["error"] == "internal_error"
        assert "store" not in answer.text
        assert stores_can_write(client)
