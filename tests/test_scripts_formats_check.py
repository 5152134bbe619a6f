"""``scripts/formats-check`` compares a server's Responses and Messages answers with the vLLM
stand-in's. Against the stand-in itself it finds no difference; against a server that answers
otherwise it names each difference and exits 1. Against a real vLLM it runs in
``scripts/gpu-check``, never here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

from doubles.engine_standins import vllm_standin
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

from reef.testing.service import serve_on_loopback

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "formats-check"


def check(url: str) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT), "--base-url", f"{url}/v1", "--model", "served"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def test_the_stand_in_matches_itself() -> None:
    app, _ = vllm_standin("served")
    with serve_on_loopback(app) as url:
        done = check(url)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "formats-check: 0 difference(s)" in done.stdout
    assert "same      messages stream: ends with [DONE]: stand-in True, server True" in done.stdout


def test_a_server_that_answers_otherwise_is_named_and_fails() -> None:
    async def empty(request: object) -> JSONResponse:
        return JSONResponse({"id": "x"})

    app = Starlette(routes=[Route("/v1/{path:path}", empty, methods=["POST"])])
    with serve_on_loopback(app) as url:
        done = check(url)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "DIFFERENT responses unknown model: status: stand-in 404, server 200" in done.stdout
    assert "DIFFERENT messages stream: events:" in done.stdout
