"""``reef serve --workers N``: N processes answer on one port under uvicorn's supervisor. Run
for real: ``reef serve`` in a subprocess on SQLite, forwarding to the scripted engine. Every
acknowledged call is stored whichever worker took it; a worker that is killed is replaced
while the other answers; SIGTERM stops them all and the command exits 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

import httpx

from reef.core.records import InferenceRecord
from reef.storage import RecordStore, open_database
from reef.testing.engines import scripted_engine
from reef.testing.service import free_port, serve_on_loopback

DEPLOYMENT = """
storage: {url: "%(url)s"}
serving: {engine: "%(engine)s"}
scenarios:
  support: {recipe: "reef.testing.service:ServiceTestRecipe"}
"""
STARTED = re.compile(r"Started server process \[(\d+)\]")


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    with serve_on_loopback(scripted_engine()) as url:
        yield f"{url}/v1"


def started_workers(log: Path) -> list[int]:
    return [int(pid) for pid in STARTED.findall(log.read_text())]


#: How long a worker may take to start or be replaced: each imports and builds the whole
#: service, which on a 2-core machine running every suite at once took over a minute.
STARTUP_SECONDS = 300.0


def wait_for(condition: object, what: str, seconds: float = STARTUP_SECONDS) -> None:
    deadline = time.monotonic() + seconds
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)  # another process's progress: nothing here to wait on


def call(base: str, number: int) -> str:
    answered = httpx.post(
        f"{base}/scenarios/support/v1/chat/completions",
        json={"messages": [{"role": "user", "content": f"question {number}"}]},
        timeout=120,
    )
    assert answered.status_code == 200, answered.text
    return answered.headers["x-reef-record-id"]


def test_two_workers_answer_on_one_port_and_stop_together(tmp_path: Path, engine_url: str) -> None:
    url = f"sqlite:///{tmp_path / 'reef.db'}"
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(DEPLOYMENT % {"url": url, "engine": engine_url})
    port = free_port()
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "reef.cli", "serve", str(deployment), "--port", str(port)]
    command += ["--allow-unauthenticated", "--workers", "2", "--log-level", "info"]
    with log.open("w") as out:
        serving = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: len(started_workers(log)) == 2, "two workers")
        wait_for(lambda: log.read_text().count("Application startup complete") == 2, "startup")
        first, second = started_workers(log)
        acknowledged = [call(base, n) for n in range(30)]
        os.kill(first, signal.SIGKILL)
        # The other worker answers while the supervisor replaces the killed one.
        acknowledged += [call(base, n) for n in range(30, 40)]
        wait_for(lambda: len(started_workers(log)) == 3, "the killed worker's replacement")
        replacement = started_workers(log)[-1]
        assert replacement not in (first, second)
        wait_for(lambda: log.read_text().count("Application startup complete") == 3, "startup")
        acknowledged += [call(base, n) for n in range(40, 50)]
        serving.send_signal(signal.SIGTERM)
        assert serving.wait(timeout=STARTUP_SECONDS) == 0, log.read_text()
    finally:
        if serving.poll() is None:
            serving.kill()
            serving.wait()
    text = log.read_text()
    assert text.count("Application shutdown complete") == 2, text  # both live workers, cleanly
    for pid in (second, replacement):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    opened = open_database(url)
    try:
        store = RecordStore(opened, "support")
        found = [store.get(record_id) for record_id in acknowledged]
        assert all(f is not None and isinstance(f.record, InferenceRecord) for f in found), (
            "an acknowledged call is missing from the store"
        )
    finally:
        opened.dispose()
