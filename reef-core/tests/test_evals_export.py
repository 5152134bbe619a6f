"""Evaluation results read back (issue 26): each evaluated artifact's scores in the order they
were evaluated with the gate's decision (the console's curve), and every result with its items
exported as JSON Lines, Parquet and a ``datasets`` folder, by ``reef export --evaluations``. On
SQLite (and PostgreSQL with REEF_TEST_DATABASE_URL); the routes are tested on a trained run in
``test_evals_gate.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="export is the service's (its server extra)")

from reef.core.evals import EvalResult, ItemOutcome
from reef.server.export import EVALUATIONS, evaluation_rows, write_export
from reef.storage import ArtifactEvaluations, Database, open_database
from reef.testing.service import grouped_deployment

SCENARIO = "s"


def _result(
    artifact: str, eval_name: str, score: float, at: float, trainer: str = "t"
) -> EvalResult:
    items = (
        ItemOutcome("i1", score, "yes" if score else "no"),
        ItemOutcome("i2", 0.0, None, error="the engine answered 503"),
    )
    return EvalResult(SCENARIO, trainer, artifact, eval_name, score, items, {"temperature": 0}, at)


def _run(database: Database) -> ArtifactEvaluations:
    """Three artifacts of trainer ``t`` on two sets, the third held back, and one of trainer
    ``u`` evaluated between them; a result saved twice stays the first."""
    evaluations = ArtifactEvaluations(database, SCENARIO)
    for n, (artifact, score) in enumerate([("a1", 0.25), ("a2", 0.75), ("a3", 0.5)]):
        evaluations.save(_result(artifact, "held_out", score, 100.0 + 10 * n))
        evaluations.save(_result(artifact, "format", 1.0, 100.0 + 10 * n + 1))
    evaluations.save(_result("b1", "held_out", 0.5, 105.0, trainer="u"))
    evaluations.save(_result("a1", "held_out", 0.99, 200.0))  # already kept: stays 0.25
    evaluations.decide("t", "a1", served=True, reason="first")
    evaluations.decide("t", "a2", served=True, reason="better")
    evaluations.decide("t", "a3", served=False, reason="held_out: 0.5000 < 0.7300")
    return evaluations


def test_the_artifacts_come_in_the_order_evaluated_with_each_sets_score_and_decision(
    storage_database: Database,
) -> None:
    evaluations = _run(storage_database)
    found, total = evaluations.artifacts("t", limit=100)
    assert total == 3
    assert [(a.number, a.artifact_id, dict(a.scores), a.served) for a in found] == [
        (1, "a1", {"held_out": 0.25, "format": 1.0}, True),
        (2, "a2", {"held_out": 0.75, "format": 1.0}, True),
        (3, "a3", {"held_out": 0.5, "format": 1.0}, False),
    ]
    assert found[2].reason == "held_out: 0.5000 < 0.7300"
    assert found[0].evaluated_at == 100.0
    every, total = evaluations.artifacts(limit=2)
    assert total == 4
    # The last two of the four, numbered among all of them; u's has no decision.
    assert [(a.number, a.trainer, a.artifact_id, a.served) for a in every] == [
        (3, "t", "a2", True),
        (4, "t", "a3", False),
    ]
    assert evaluations.artifacts("u", limit=5)[0][0].served is None


def test_every_result_is_read_a_page_at_a_time_oldest_first(storage_database: Database) -> None:
    evaluations = ArtifactEvaluations(storage_database, SCENARIO)
    # More than two pages, several results measured at the same time.
    for n in range(450):
        evaluations.save(_result(f"a{n:03d}", "held_out", n / 450, float(n // 3)))
    ArtifactEvaluations(storage_database, "other").save(_result("x", "held_out", 1.0, 0.0))
    read = list(evaluations.every_result())
    assert [r.artifact_id for r in read] == [f"a{n:03d}" for n in range(450)]
    assert read[7].items == _result("a007", "held_out", 7 / 450, 2.0).items
    assert list(evaluations.every_result("nobody")) == []


def test_an_export_row_holds_the_items_the_sampling_and_the_decision(
    storage_database: Database,
) -> None:
    _run(storage_database)
    rows = list(evaluation_rows(storage_database, SCENARIO, "t"))
    assert [(r["artifact_id"], r["eval"], r["served"]) for r in rows] == [
        ("a1", "held_out", True),
        ("a1", "format", True),
        ("a2", "held_out", True),
        ("a2", "format", True),
        ("a3", "held_out", False),
        ("a3", "format", False),
    ]
    first = rows[0]
    assert first["score"] == 0.25
    assert first["errors"] == 1
    assert first["items"][1] == {
        "item_id": "i2",
        "score": 0.0,
        "reply": None,
        "error": "the engine answered 503",
    }
    assert first["sampling"] == {"temperature": 0}
    assert first["measured_at"] == 100.0
    assert rows[4]["gate_reason"] == "held_out: 0.5000 < 0.7300"
    others = list(evaluation_rows(storage_database, SCENARIO, "u"))
    assert [(r["artifact_id"], r["served"], r["gate_reason"]) for r in others] == [
        ("b1", None, None)
    ]


@pytest.mark.parametrize("export_format", ["jsonl", "parquet", "hf"])
def test_each_format_holds_the_rows(
    storage_database: Database, tmp_path: Path, export_format: str
) -> None:
    pytest.importorskip("pyarrow")
    if export_format == "hf":
        pytest.importorskip("datasets")
    _run(storage_database)
    rows = list(evaluation_rows(storage_database, SCENARIO))
    output = tmp_path / f"evals.{export_format}"
    assert write_export(iter(rows), export_format, output, EVALUATIONS) == len(rows)  # type: ignore[arg-type]
    if export_format == "jsonl":
        read = [json.loads(line) for line in output.read_text().splitlines()]
    elif export_format == "parquet":
        import pyarrow.parquet as pq

        read = [EVALUATIONS.nested(r) for r in pq.read_table(output).to_pylist()]
    else:
        from datasets import load_from_disk

        dataset = load_from_disk(str(output))
        read = [EVALUATIONS.nested(dataset[n]) for n in range(len(dataset))]
    assert read == rows


def test_reef_export_writes_the_evaluations_of_a_trainer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from reef.cli import main

    source = grouped_deployment(tmp_path, "s")
    database = open_database(f"sqlite:///{tmp_path}/s.db")
    _run(database)
    expected = list(evaluation_rows(database, SCENARIO, "t"))
    database.dispose()
    out = tmp_path / "evals.jsonl"
    argv = ["export", str(source), "s", "--evaluations", "--trainer", "t", "--output", str(out)]
    assert main(argv) == 0
    assert "exported 6 evaluation results of scenario s" in capsys.readouterr().out
    assert [json.loads(line) for line in out.read_text().splitlines()] == expected


def test_reef_export_of_evaluations_refuses_the_sample_filters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from reef.cli import main

    source = grouped_deployment(tmp_path, "s")
    out = tmp_path / "evals.jsonl"
    argv = ["export", str(source), "s", "--evaluations", "--output", str(out)]
    assert main([*argv, "--tag", "team=a", "--reward-min", "0.5"]) == 2
    error = capsys.readouterr().err
    assert "--tag, --reward-min choose samples; --evaluations exports every evaluation" in error
    assert not out.exists()
    assert not (tmp_path / "s.db").exists()
