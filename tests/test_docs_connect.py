"""The examples of docs/connect.md and the report bodies of docs/service.md work as written.

A Reef application on loopback (SQLite, a token with the ``infer`` and ``feedback`` scopes, a
scenario ``support`` answered by the scripted OpenAI-compatible engine) serves them: each Python
and shell block of the connect page runs in a process of its own with ``REEF_URL`` and
``REEF_TOKEN`` set, through the real ``openai``, ``anthropic``, ``langchain-openai`` and
``langgraph`` packages, and must exit 0; the report examples of the service page are posted and
answered with the status and body the page shows.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from reef.storage import RecordStore, open_database
from reef.testing.engines import scripted_engine
from reef.testing.service import (
    ServiceToken,
    auth_section,
    serve_on_loopback,
    served_scenario,
    service_app,
)

ROOT = Path(__file__).resolve().parents[1]
CONNECT = ROOT / "docs" / "connect.md"
SERVICE = ROOT / "docs" / "service.md"
AGENT = ServiceToken("agent", ("infer", "feedback"))
_BLOCK = re.compile(r"^(<!-- not-run:[^\n]*-->\n)?```(python|bash)\n(.*?)^```$", re.S | re.M)


@pytest.fixture(scope="module")
def reef(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, RecordStore]]:
    """The service's base URL, and the scenario's record store."""
    url = f"sqlite:///{tmp_path_factory.mktemp('connect') / 'reef.db'}"
    database = open_database(url)
    with serve_on_loopback(scripted_engine()) as engine:
        text = served_scenario(url, f"{engine}/v1", auth_section(AGENT))
        with serve_on_loopback(service_app(text, url, database)) as base:
            yield base, RecordStore(database, "support")
    database.dispose()


def blocks() -> list[tuple[str, str]]:
    """The connect page's Python and shell blocks, each with its language."""
    return [(lang, body) for _, lang, body in _BLOCK.findall(CONNECT.read_text(encoding="utf-8"))]


def test_the_page_has_its_examples() -> None:
    assert [lang for lang, _ in blocks()] == ["python"] * 3 + ["bash"] * 2 + ["python"] * 2


@pytest.mark.parametrize("index", range(len(blocks())))
def test_each_example_runs_against_reef(index: int, reef: tuple[str, RecordStore]) -> None:
    pytest.importorskip("langchain_openai")
    pytest.importorskip("langgraph")
    base, store = reef
    lang, body = blocks()[index]
    before = len(store.read_after(None))
    command = [sys.executable, "-c", body] if lang == "python" else ["bash", "-euo", "pipefail"]
    done = subprocess.run(
        command,
        input=None if lang == "python" else body,
        env={**os.environ, "REEF_URL": base, "REEF_TOKEN": AGENT.secret},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{body}\n{done.stdout}\n{done.stderr}"
    assert len(store.read_after(None)) > before  # the example's calls were recorded
    ids = set(re.findall(r"\b(?:inf-|resp_|msg_)[0-9a-f]{32}\b", done.stdout))
    stored = {record.id for record in store.read_after(None)}
    assert ids, f"the example prints no answer's id:\n{done.stdout}"
    assert ids <= stored  # the ids it shows are the records' ids, what a report references


#: The report examples of docs/service.md: a ``json`` block whose first line is
#: ``// POST ... -> <status>``, then the body (with ``$CALL`` for a call's id) and, in the
#: ``text`` block right after it, the answer.
_REPORT_EXAMPLE = re.compile(
    r"^```json\n// POST /reef/scenarios/support/reports -> (?P<status>\d{3})\n(?P<body>.*?)^```\n"
    r"\n?(?:[^\n`]*\n)*?```text\n(?P<answer>.*?)^```$",
    re.S | re.M,
)


def test_the_report_examples_are_answered_as_the_page_says(
    reef: tuple[str, RecordStore],
) -> None:
    base, _ = reef
    examples = list(_REPORT_EXAMPLE.finditer(SERVICE.read_text(encoding="utf-8")))
    assert len(examples) >= 5
    headers = AGENT.headers
    with httpx.Client(base_url=base, headers=headers, timeout=30) as http:

        def call(conversation: list[dict[str, str]]) -> tuple[str, dict[str, str]]:
            done = http.post(
                "/scenarios/support/v1/chat/completions",
                json={"model": "policy", "messages": conversation},
            )
            done.raise_for_status()
            return str(done.json()["id"]), done.json()["choices"][0]["message"]

        ids = {"$CALL": call([{"role": "user", "content": "Where is my parcel?"}])[0]}
        question = {"role": "user", "content": "Hello"}
        ids["$INNER"], reply = call([question])
        # A second call continues the first, which is then an inner call of the trajectory.
        ids["$LAST"] = call([question, reply, {"role": "user", "content": "More"}])[0]

        def filled(text: str) -> str:
            for placeholder, value in ids.items():
                text = text.replace(placeholder, value)
            return text

        for example in examples:
            body = filled(example["body"])
            answer = http.post(
                "/reef/scenarios/support/reports",
                content=body.encode(),
                headers={"content-type": "application/json"},
            )
            said = filled(example["answer"].strip())
            assert answer.status_code == int(example["status"]), (body, answer.text)
            expected = json.loads(said)
            got = answer.json()
            if "content_hash" in expected:  # the page shows "..." for the hash
                assert re.fullmatch(r"[0-9a-f]{64}", got["content_hash"])
                expected["content_hash"] = got["content_hash"]
            assert got == expected, body
