"""A credential a client put in a request line never reaches the log: ``reef serve`` (a
subprocess, uvicorn's access log on) is called with its own token and other credentials in the
query string and the path; its log names the requests and none of the secrets."""

from __future__ import annotations

import logging
from pathlib import Path
from urllib.parse import quote

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

import httpx

from reef.server.access_log import REDACTED, CredentialFilter
from reef.testing.serve import ServeProcess

TOKEN = "access-log-admin-secret+/="
DEPLOYMENT = f"""
storage: {{url: "sqlite:///%(db)s"}}
auth: {{tokens: {{admin: {{token: "{TOKEN}", scopes: [infer, feedback, admin]}}}}}}
scenarios:
  support:
    recipe: grouped
"""


def test_credentials_in_a_request_line_are_redacted_in_the_access_log(tmp_path: Path) -> None:
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(DEPLOYMENT % {"db": tmp_path / "reef.db"}, encoding="utf-8")
    log = tmp_path / "serve.log"
    serve = ServeProcess(deployment, log, token=TOKEN, log_level="info")
    try:
        with httpx.Client(base_url=serve.base_url, timeout=30) as client:
            # The token where a careless client puts it, spelled as a URL spells it.
            client.get("/reef/status", params={"token": TOKEN, "page": "2"})
            client.get("/reef/status", params={"access_token": "other-secret-1", "x": TOKEN})
            client.get("/reef/status?api_key=other-secret-2&key=other-secret-3&sig=s3cr3t")
            client.get("/reef/status", params={"password": "other-secret-4"})
            client.get("/reef/status", headers=serve.headers)  # the right way: a header
    finally:
        assert serve.terminate() == 0
    text = log.read_text(encoding="utf-8")
    assert text.count('"GET /reef/status?') >= 4, text  # the requests are logged
    assert "page=2" in text
    assert REDACTED in text
    secrets = ("other-secret-1", "other-secret-2", "other-secret-3", "s3cr3t", "other-secret-4")
    for secret in (TOKEN, quote(TOKEN, safe=""), *secrets):
        assert secret not in text, (secret, text)


def test_the_filter_rewrites_every_argument_and_drops_no_record() -> None:
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s" %d',
        ("127.0.0.1:5", "GET", "/reef/status?token=abc&page=1", 200), None,
    )  # fmt: skip
    assert CredentialFilter(["abc-secret"]).filter(record)
    assert record.getMessage() == f'127.0.0.1:5 - "GET /reef/status?token={REDACTED}&page=1" 200'
