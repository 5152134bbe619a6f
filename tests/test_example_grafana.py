"""The Grafana dashboard of examples/grafana/ (docs/observe.md#the-grafana-dashboard): every
query it holds names only metrics that ``GET /metrics`` exports, as a real scrape of the
service names their samples."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("prometheus_client")

from prometheus_client.parser import text_string_to_metric_families
from starlette.testclient import TestClient

from reef.storage import Database
from reef.testing.service import ServiceToken, auth_section, service_app

DASHBOARD = Path(__file__).resolve().parents[1] / "examples" / "grafana" / "reef.json"
TOKEN = ServiceToken("scraper", ("metrics",))
#: The sample names of each family type, as Prometheus stores them.
SUFFIXES = {
    "counter": ("_total",),
    "info": ("_info",),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
}


def queries(node: Any) -> Iterator[str]:
    """Every query of the dashboard: each target's ``expr`` and each variable's query."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "definition") and isinstance(value, str):
                yield value
            elif key == "query" and isinstance(value, dict) and "query" in value:
                yield value["query"]
            else:
                yield from queries(value)
    elif isinstance(node, list):
        for item in node:
            yield from queries(item)


def exported(storage_url: str, database: Database) -> set[str]:
    text = (
        f'storage: {{url: "{storage_url}"}}\n{auth_section(TOKEN)}'
        "scenarios:\n  support:\n    recipe: servicetest\n"
    )
    with TestClient(service_app(text, storage_url, database)) as client:
        answer = client.get("/metrics", headers=TOKEN.headers)
    assert answer.status_code == 200, answer.text
    return {
        family.name + suffix
        for family in text_string_to_metric_families(answer.text)
        for suffix in SUFFIXES[family.type]
    }


def test_every_query_names_exported_metrics(storage_url: str, storage_database: Database) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    names = exported(storage_url, storage_database)
    found = list(queries(dashboard))
    assert len(found) >= len(dashboard["panels"])  # each panel has at least one
    used: set[str] = set()
    for query in found:
        metrics = set(re.findall(r"\breef_[a-z_]+\b", query))
        assert metrics, f"a query that names no Reef metric: {query}"
        assert metrics <= names, f"{sorted(metrics - names)} not exported: {query}"
        used |= metrics
    # Every family is on the dashboard (a histogram by its buckets).
    families = {re.sub(r"_(bucket|sum|count)$", "", name) for name in names}
    shown = {re.sub(r"_(bucket|sum|count)$", "", name) for name in used}
    assert families == shown
