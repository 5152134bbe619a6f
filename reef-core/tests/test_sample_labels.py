"""Relabelling (issue 30): a person's reward for a sample, kept as an audit row (who, when, from
what, to what, why), in force from the next job the trainer builds with the sample, and taken
back the same way; the sample's stored body never changes. On SQLite (and PostgreSQL with
REEF_TEST_DATABASE_URL)."""

from __future__ import annotations

from typing import Any

import pytest

from reef.core.atif import trajectory_to_json
from reef.core.atif_build import trajectory_from_records
from reef.core.job_data import JobData, TaskSample, TrajectorySample, sample_body
from reef.pipeline_context import PipelineContext
from reef.recipe.grouped.processor import GroupedJobData
from reef.record2sample import ReportSamples
from reef.storage import Database, NewSample, SampleLabels, TrainerSamples
from reef.testing.records import call, report
from reef.train.pipeline import TrainingPipeline


def _pipeline(database: Database) -> TrainingPipeline:
    context = PipelineContext("s", "c", (), "auto", has_runtime_loader=False)
    return TrainingPipeline(
        ReportSamples(context, None),
        GroupedJobData(context, job_samples=2),
        samples=TrainerSamples(database, "s"),
        context=context,
    )


def _rewards(data: JobData | None) -> dict[str, Any]:
    assert data is not None
    return {str(s.sample_id): getattr(s, "reward", None) for s in data.samples}


def test_the_newest_label_is_in_force_and_every_label_is_kept(storage_database: Database) -> None:
    labels = SampleLabels(storage_database, "s")
    assert labels.in_force(["a"]) == {}
    labels.label("a", 0.9, previous_reward=0.25, labelled_by="alice", note="the reply is right")
    labels.label("b", 0.0, previous_reward=1.0, labelled_by="bob")
    labels.label("a", 0.5, previous_reward=0.9, labelled_by="bob")
    SampleLabels(storage_database, "other").label("a", 7.0, previous_reward=None, labelled_by="x")
    assert labels.in_force(["a", "b", "c"]) == {"a": 0.5, "b": 0.0}
    labels.label("b", None, previous_reward=0.0, labelled_by="alice", note="my mistake")
    assert labels.in_force(["a", "b"]) == {"a": 0.5}
    history = labels.history("a")
    assert [(h.reward, h.previous_reward, h.labelled_by) for h in history] == [
        (0.9, 0.25, "alice"),
        (0.5, 0.9, "bob"),
    ]
    assert history[0].note == "the reply is right"
    assert history[0].labelled_at <= history[1].labelled_at


def test_a_job_trains_the_labelled_reward_and_the_stored_sample_is_unchanged(
    storage_database: Database,
) -> None:
    pipeline = _pipeline(storage_database)
    for name, score in (("r1", 0.25), ("r2", 0.75), ("r3", 0.0), ("r4", 1.0)):
        pipeline.push(call(f"{name}.c", session=name, artifact="art1"))
        pipeline.push(report(name, f"{name}.c", score=score))
    store = TrainerSamples(storage_database, "s")
    first, second = [s.id for s in store.untrained("c")][:2]
    bodies = {s.id: s.body for s in store.get([first, second])}
    labels = SampleLabels(storage_database, "s")
    labels.label(first, 1.0, previous_reward=0.25, labelled_by="alice")
    reservation = pipeline.reserve()
    assert reservation is not None
    assert _rewards(reservation.data) == {first: 1.0, second: 0.75}
    reservation.commit()
    assert {s.id: s.body for s in store.get([first, second])} == bodies
    # A label given while a sample waits counts in its job; one taken back no longer does.
    third, fourth = [s.id for s in store.untrained("c")][:2]
    labels.label(third, 0.5, previous_reward=0.0, labelled_by="bob")
    labels.label(fourth, 0.1, previous_reward=1.0, labelled_by="bob")
    labels.label(fourth, None, previous_reward=0.1, labelled_by="bob")
    again = pipeline.reserve()
    assert again is not None
    assert _rewards(again.data) == {third: 0.5, fourth: 1.0}


def test_the_labels_route_keeps_who_and_when_and_refuses_what_it_cannot_label(
    storage_database: Database, storage_url: str
) -> None:
    pytest.importorskip("starlette", reason="the labels route is the service's (its server extra)")
    from starlette.testclient import TestClient

    from reef.testing.service import ServiceToken, auth_section, served_scenario, service_app

    admin, agent = ServiceToken("alice", ("admin",)), ServiceToken("agent", ("infer", "feedback"))
    text = served_scenario(storage_url, "http://127.0.0.1:9/v1", auth_section(admin, agent), "s")
    store = TrainerSamples(storage_database, "s")
    trajectory = trajectory_to_json(
        trajectory_from_records([call("u1", session="up", scenario="s")], trajectory_id="up")
    )
    trajectory["extra"] = {"reef": {"reward": 0.25}}
    store.add_upload(NewSample("up", "trajectory", sample_body(TrajectorySample(trajectory))))
    store.add_upload(NewSample("a-task", "task", sample_body(TaskSample("a-task", {"n": 1}))))
    with TestClient(service_app(text, storage_url, storage_database)) as client:
        route = "/reef/scenarios/s/labels"
        given = client.post(
            route, json={"sample_id": "up", "reward": 1, "note": "right"}, headers=admin.headers
        )
        assert given.status_code == 200, given.text
        label = given.json()
        assert (label["reward"], label["previous_reward"], label["labelled_by"]) == (
            1.0,
            0.25,
            "alice",
        )
        assert label["note"] == "right"
        detail = client.get("/reef/scenarios/s/samples/up", headers=admin.headers).json()
        assert detail["sample"]["label"] == 1.0
        assert detail["sample"]["reward"] == 0.25  # its own reward, as it came
        assert [x["reward"] for x in detail["labels"]] == [1.0]
        page = client.get("/reef/scenarios/s/samples", headers=admin.headers).json()
        assert {s["id"]: s["label"] for s in page["samples"]} == {"up": 1.0, "a-task": None}

        back = client.post(route, json={"sample_id": "up", "reward": None}, headers=admin.headers)
        assert back.status_code == 200
        assert back.json()["previous_reward"] == 1.0
        detail = client.get("/reef/scenarios/s/samples/up", headers=admin.headers).json()
        assert detail["sample"]["label"] is None
        assert [x["reward"] for x in detail["labels"]] == [1.0, None]

        def refused(body: Any, field: str, words: str, token: ServiceToken = admin) -> None:
            answer = client.post(route, json=body, headers=token.headers)
            assert answer.status_code == 400, answer.text
            problem = answer.json()["problems"][0]
            assert problem["field"] == field, problem
            assert words in problem["reason"], problem

        refused({"sample_id": "up", "reward": None}, "$.reward", "no label in force")
        refused({"sample_id": "gone", "reward": 1}, "$.sample_id", "no sample 'gone'")
        refused({"sample_id": "a-task", "reward": 1}, "$.sample_id", "task sample")
        refused({"sample_id": "up", "reward": "high"}, "$.reward", "")
        refused({"sample_id": "up", "reward": True}, "$.reward", "")
        refused({"sample_id": "up"}, "$.reward", "")
        refused({"sample_id": "up", "reward": 1, "note": "x" * 2001}, "$.note", "")
        forbidden = client.post(route, json={"sample_id": "up", "reward": 1}, headers=agent.headers)
        assert forbidden.status_code == 403
    assert [x.reward for x in SampleLabels(storage_database, "s").history("up")] == [1.0, None]


@pytest.mark.parametrize("value", ["1e999", "-1e999"])
def test_a_reward_that_is_not_finite_is_refused(value: str) -> None:
    pytest.importorskip("starlette", reason="the labels route is the service's (its server extra)")
    from reef.server.bodies import Relabel, structure
    from reef.server.errors import ApiError

    with pytest.raises(ApiError) as refused:
        structure({"sample_id": "a", "reward": float(value)}, Relabel)
    assert refused.value.status == 400
