"""A page of another site against the service on loopback, as a browser sends its requests.

The quickstart's service runs without tokens and trusts loopback. A browser on the same machine
reaches loopback for any page it shows: with a form or a ``fetch`` that needs no permission it
sends ``text/plain`` bodies and an ``Origin`` naming the page's site, and a host name rebound to
127.0.0.1 (DNS rebinding) makes the page's own origin the service, so it reads answers back.
Each attack below is what such a page sends; each is refused, nothing of it is stored, and the
service's own clients (no ``Origin``, or the console's own) go on as before. Real uvicorn on
loopback, real stores, httpx."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

import httpx
from starlette.testclient import TestClient

from reef.core.atif import trajectory_to_json
from reef.core.atif_build import trajectory_from_records
from reef.core.deployment import DeploymentError
from reef.core.records import InferenceRecord
from reef.server import ServerOptions
from reef.storage import Database, ScenarioSettings, TaskStorage, TrainerSamples
from reef.testing.engines import scripted_engine
from reef.testing.service import ServiceToken, auth_section, serve_on_loopback, service_app

SCENARIOS = """scenarios:
  support:
    recipe: servicetest
    training: {component: noop}
"""
UNAUTHENTICATED = 'storage: {url: "%(url)s"}\nserving: {engine: "%(engine)s/v1"}\n' + SCENARIOS
#: A page of another site, as the browser names it.
EVIL = "http://evil.example"


def atif(trajectory_id: str) -> dict[str, Any]:
    record = InferenceRecord(
        "c1",
        "support",
        {"messages": [{"role": "user", "content": "hello"}]},
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]},
    )
    return trajectory_to_json(trajectory_from_records([record], trajectory_id=trajectory_id))


@pytest.fixture
def service(storage_url: str, storage_database: Database) -> Iterator[str]:
    """The service without tokens (--allow-unauthenticated) on loopback; its base URL."""
    with serve_on_loopback(scripted_engine()) as engine:
        app = service_app(
            UNAUTHENTICATED % {"url": storage_url, "engine": engine},
            storage_url,
            storage_database,
            options=ServerOptions(allow_unauthenticated=True),
        )
        with serve_on_loopback(app) as url:
            yield url


def as_a_page(method: str, url: str, body: str | None = None, **headers: str) -> Any:
    """What a browser sends for a page of :data:`EVIL` that posts ``body`` as a form or a
    plain ``fetch`` (no permission asked: ``text/plain``)."""
    sent = {"origin": EVIL, **headers}
    if body is not None:
        sent["content-type"] = "text/plain;charset=UTF-8"
    return httpx.request(method, url, content=body, headers=sent, timeout=30)


def test_a_page_of_another_site_cannot_change_the_service(
    service: str, storage_database: Database
) -> None:
    """The four attacks of a page on another origin: the training mode, a TRAIN instruction,
    a planted item, a deleted item. Each is refused before the route reads anything, and the
    store is as it was."""
    scenario = f"{service}/reef/scenarios/support"
    # The service's own client (no Origin) stores an item the page will try to delete.
    kept = httpx.post(f"{service}/reef/items", json={"trajectory": atif("kept")}, timeout=30)
    assert kept.status_code == 201, kept.text

    attacks = {
        "mode": as_a_page("POST", f"{scenario}/update", '{"training_mode": "manual"}'),
        "instruction": as_a_page("POST", f"{scenario}/instructions", '{"request_id": "evil"}'),
        "planted": as_a_page(
            "POST", f"{service}/reef/items", json.dumps({"trajectory": atif("planted")})
        ),
        "deleted": as_a_page("DELETE", f"{service}/reef/items/kept"),
    }
    statuses = {name: answer.status_code for name, answer in attacks.items()}
    assert statuses == dict.fromkeys(attacks, 403)
    for name, answer in attacks.items():
        (problem,) = answer.json()["problems"]
        assert problem["field"] == "origin", (name, problem)

    assert ScenarioSettings(storage_database, "support").get("training_mode") is None
    assert TrainerSamples(storage_database, "support").unread_instructions("noop") == []
    items = TaskStorage(storage_database, "").open("reef.data-items")
    assert items.get("planted") is None
    assert items.get("kept") is not None


def test_a_text_body_is_refused_on_every_json_route_even_without_an_origin(service: str) -> None:
    """A body the route reads as JSON must say so (415): ``text/plain`` is what any page may
    send anywhere, and an old browser or a plugin may leave the Origin out."""

    def update(content_type: str) -> Any:
        return httpx.post(
            f"{service}/reef/scenarios/support/update",
            content=b'{"training_mode": "manual"}',
            headers={"content-type": content_type},
            timeout=30,
        )

    mode = update("text/plain")
    assert mode.status_code == 415, mode.text
    assert mode.json()["problems"][0]["field"] == "content-type"
    chat = httpx.post(
        f"{service}/scenarios/support/v1/chat/completions",
        content=b'{"messages": [{"role": "user", "content": "hi"}]}',
        timeout=30,
    )
    assert chat.status_code == 415, chat.text
    taken = update("application/json; charset=utf-8")  # declared JSON, with its charset
    assert taken.status_code == 200, taken.text


def test_a_rebound_host_name_reads_nothing_and_changes_nothing(service: str) -> None:
    """DNS rebinding: the page's host name now resolves to 127.0.0.1, so its requests are
    same-origin (no foreign Origin) and their answers readable. The Host names the page's
    site, not loopback: refused, status and console included."""
    port = service.rsplit(":", 1)[1]
    rebound = {"host": f"rebound.example:{port}"}
    for path in ("/reef/status", "/reef/console/", "/openapi.json"):
        read = httpx.get(f"{service}{path}", headers=rebound, timeout=30)
        assert read.status_code == 403, (path, read.text)
        assert read.json()["problems"][0]["field"] == "host"
    change = httpx.post(
        f"{service}/reef/scenarios/support/update",
        json={"training_mode": "manual"},
        headers={**rebound, "origin": f"http://rebound.example:{port}"},
        timeout=30,
    )
    assert change.status_code == 403
    assert change.json()["problems"][0]["field"] == "host"
    # Loopback names are the service's own, the console's Origin too.
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
        assert httpx.get(f"{service}/reef/status", headers={"host": host}, timeout=30).is_success
    console_post = httpx.post(
        f"{service}/reef/scenarios/support/update",
        json={"training_mode": "auto"},
        headers={"origin": f"http://localhost:{port}", "host": f"localhost:{port}"},
        timeout=30,
    )
    assert console_post.status_code == 200, console_post.text


# -- with tokens: the allow-lists -------------------------------------------------------------

ADMIN_TOKEN = ServiceToken("admin", ("infer", "feedback", "admin"))


def authenticated_client(
    storage_url: str, storage_database: Database, service_lines: str, base_url: str
) -> TestClient:
    text = (
        f'storage: {{url: "{storage_url}"}}\n'
        + service_lines
        + auth_section(ADMIN_TOKEN)
        + SCENARIOS
    )
    return TestClient(service_app(text, storage_url, storage_database), base_url=base_url)


def test_with_tokens_any_host_unless_the_deployment_lists_them(
    storage_url: str, storage_database: Database
) -> None:
    """With tokens every Host is taken by default (a token is the credential); a deployment
    that lists ``service.allowed_hosts`` is answered for those names and loopback only."""
    with authenticated_client(
        storage_url, storage_database, "", "http://reef.internal:8000"
    ) as client:
        assert client.get("/reef/status", headers=ADMIN_TOKEN.headers).status_code == 200
    listed = "service: {allowed_hosts: [reef.example.com, 'gpu-box:8000']}\n"
    for base_url, status in (
        ("http://reef.example.com:1234", 200),  # a name without a port: any port
        ("http://gpu-box:8000", 200),
        ("http://gpu-box:9000", 403),
        ("http://127.0.0.1:8000", 200),  # loopback is the service's own, list or not
        ("http://rebound.example", 403),
    ):
        with authenticated_client(storage_url, storage_database, listed, base_url) as client:
            answer = client.get("/reef/status", headers=ADMIN_TOKEN.headers)
            assert answer.status_code == status, (base_url, answer.text)
            if status == 403:
                assert "reef.example.com, gpu-box:8000" in answer.json()["message"]


def test_with_tokens_a_foreign_origin_still_changes_nothing_unless_listed(
    storage_url: str, storage_database: Database
) -> None:
    """A page served elsewhere (behind a proxy, say) may change state only when its origin is
    listed in ``service.allowed_origins``; the service's own origin always may."""
    listed = "service: {allowed_origins: ['https://console.example.com']}\n"
    update = {"training_mode": "manual"}
    with authenticated_client(
        storage_url, storage_database, listed, "http://reef.internal:8000"
    ) as client:
        for origin, status in (
            (EVIL, 403),
            ("null", 403),  # a sandboxed frame, a file
            ("https://console.example.com", 200),
            ("http://reef.internal:8000", 200),
        ):
            answer = client.post(
                "/reef/scenarios/support/update",
                json=update,
                headers={**ADMIN_TOKEN.headers, "origin": origin},
            )
            assert answer.status_code == status, (origin, answer.text)
        # Reading is never refused for an Origin: the page cannot read the answer (no CORS).
        read = client.get("/reef/status", headers={**ADMIN_TOKEN.headers, "origin": EVIL})
        assert read.status_code == 200


def test_an_allow_list_entry_that_is_no_host_is_a_deployment_problem(
    storage_url: str, storage_database: Database
) -> None:
    for lines, words in (
        ("service: {allowed_hosts: ['http://reef.example.com']}\n", "is not a host name"),
        ("service: {allowed_origins: ['console.example.com']}\n", "is not an origin"),
    ):
        with pytest.raises(DeploymentError, match=words):
            authenticated_client(storage_url, storage_database, lines, "http://x")
