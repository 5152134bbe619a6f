"""The routes the console reads (the sample list and detail, the job history) and the console's
page itself, through Starlette's TestClient against real stores (SQLite, and PostgreSQL when
configured) and a scripted engine on loopback: filters and paging, provenance (records, report,
upload, task, the jobs that consumed a sample and what an extension said of it), refused
queries, and auth: no data without a token, the page without one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

# The server extra (reef-core[server]); without it reef-core's own tests skip this module.
pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from starlette.testclient import TestClient

from reef.core.atif import trajectory_to_json
from reef.core.atif_build import trajectory_from_records
from reef.core.job_data import TaskSample, TrajectorySample, sample_body
from reef.core.records import InferenceRecord
from reef.server import RECORD_ID_HEADER, ServerOptions
from reef.storage import Database, JobHistory, NewSample, SampleOfJob, StaleSamples, TrainerSamples
from reef.testing.engines import scripted_engine
from reef.testing.service import ServiceToken, auth_section, serve_on_loopback, service_app

TOKENS = (
    ServiceToken("admin", ("infer", "feedback", "admin")),
    ServiceToken("billing", ("admin",), ("billing",)),
    ServiceToken("grader", ("infer", "feedback")),
)
ADMIN, BILLING_ADMIN, GRADER = (token.headers for token in TOKENS)

DEPLOYMENT = (
    """
storage: {url: "%(url)s"}
serving: {engine: "%(engine)s/v1"}
"""
    + auth_section(*TOKENS)
    + """scenarios:
  support:
    recipe: servicetest
    training: {component: noop}
  billing:
    recipe: servicetest
    training: {component: noop}
"""
)


@pytest.fixture(scope="module")
def engine_url() -> Iterator[str]:
    with serve_on_loopback(scripted_engine()) as url:
        yield url


@pytest.fixture
def client(storage_url: str, storage_database: Database, engine_url: str) -> Iterator[TestClient]:
    text = DEPLOYMENT % {"url": storage_url, "engine": engine_url}
    with TestClient(service_app(text, storage_url, storage_database)) as test_client:
        yield test_client


def _scored_sample(client: TestClient, storage_database: Database) -> tuple[str, str]:
    """A call through the service, a report on it, and the sample a stage would make of them
    (group ``g``, with a mate); the call's and the report's ids."""
    messages = [{"role": "user", "content": "What is   six times seven?\n" + "x" * 300}]
    answer = client.post(
        "/scenarios/support/v1/chat/completions", json={"messages": messages}, headers=GRADER
    )
    record_id = answer.headers[RECORD_ID_HEADER]
    report = {"id": "r1", "references": [record_id], "score": 0.5, "feedback": "close"}
    assert client.post("/reef/scenarios/support/reports", json=report, headers=GRADER).is_success
    record = InferenceRecord(record_id, "support", {"messages": messages}, answer.json())
    trajectory = trajectory_to_json(trajectory_from_records([record], trajectory_id="t"))
    scored = TrajectorySample(
        trajectory, reward=0.5, feedback="close", source_record_ids=(record_id,), report_id="r1"
    )
    mate = TrajectorySample(trajectory, reward=0.0)
    samples = TrainerSamples(storage_database, "support")
    samples.register_trainer("noop", reads_uploads=True)
    samples.add_record_samples(
        "noop",
        [NewSample("s:0", "trajectory", sample_body(scored)),
         NewSample("s:1", "trajectory", sample_body(mate))],
        [record_id, "r1"],
    )  # fmt: skip
    return record_id, "r1"


def _ids(client: TestClient, **query: Any) -> list[str]:
    answer = client.get("/reef/scenarios/support/samples", params=query, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    return [s["id"] for s in answer.json()["samples"]]


def test_the_sample_list_pages_and_filters_the_store(
    client: TestClient, storage_database: Database
) -> None:
    _scored_sample(client, storage_database)
    samples = TrainerSamples(storage_database, "support")
    samples.add_samples(
        "noop", [NewSample("tasks/swe/1", "task", sample_body(TaskSample("tasks/swe/1", {})))]
    )
    samples.commit_submission("noop", "job-1", ["s:1"])
    StaleSamples(storage_database, "support").replace("noop", ["s:0"])
    samples.insert_into_manual_buffer("noop", ["tasks/swe/1"])

    page = client.get("/reef/scenarios/support/samples", headers=ADMIN).json()
    assert page["scenario"] == "support"
    assert (page["total"], page["next"]) == (3, None)
    first, mate, task = page["samples"]
    assert first["id"] == "s:0"
    assert (first["kind"], first["group_id"], first["origin"]) == ("trajectory", "s:0", "record")
    assert (first["reward"], first["report_id"], first["made_by"]) == (0.5, "r1", "noop")
    assert first["steps"] == 2
    # the first user message, its spaces folded, cut at 160 characters
    assert first["preview"].startswith("What is six times seven? xxx")
    assert len(first["preview"]) == 160
    assert first["preview"].endswith("…")
    assert (first["stale_for"], first["trained_by"]) == (["noop"], {})
    assert mate["trained_by"] == {"noop": 1}
    assert (task["kind"], task["preview"], task["steps"], task["reward"]) == (
        "task", "tasks/swe/1", None, None,
    )  # fmt: skip

    assert _ids(client, order="desc") == ["tasks/swe/1", "s:1", "s:0"]
    assert _ids(client, kind="task") == ["tasks/swe/1"]
    assert _ids(client, trained="true") == ["s:1"]
    assert _ids(client, trained="false", kind="trajectory") == ["s:0"]
    assert _ids(client, stale="true") == ["s:0"]
    assert _ids(client, stale="false", trainer="noop") == ["s:1", "tasks/swe/1"]
    assert _ids(client, group="s:0") == ["s:0", "s:1"]
    assert _ids(client, chosen="true") == ["tasks/swe/1"]
    assert _ids(client, chosen="false", trainer="noop") == ["s:0", "s:1"]
    assert task["manual_buffer"] == ["noop"]
    one = client.get("/reef/scenarios/support/samples", params={"limit": 2}, headers=ADMIN).json()
    assert [s["id"] for s in one["samples"]] == ["s:0", "s:1"]
    assert one["next"] is not None
    assert _ids(client, limit=2, after=one["next"]) == ["tasks/swe/1"]
    assert client.get("/reef/scenarios/billing/samples", headers=ADMIN).json()["total"] == 0

    # A curator's filters, the reward order and the last page, each page's cursors both ways.
    assert _ids(client, text="SIX TIMES") == ["s:0", "s:1"]  # both hold the call's messages
    assert _ids(client, reward_min="0.25") == ["s:0"]
    assert _ids(client, reward_max="0.25", reward_min="-1e3") == ["s:1"]
    assert _ids(client, sort="reward", order="desc") == ["s:0", "s:1", "tasks/swe/1"]
    last = client.get(
        "/reef/scenarios/support/samples", params={"last": "true", "limit": 2}, headers=ADMIN
    ).json()
    assert [s["id"] for s in last["samples"]] == ["s:1", "tasks/swe/1"]
    assert (last["next"], last["previous"], last["total"]) == (None, "0.2", 3)
    assert _ids(client, limit=2, before=last["previous"]) == ["s:0"]
    by_reward = {"sort": "reward", "limit": 1, "order": "desc", "count": "false"}
    top = client.get("/reef/scenarios/support/samples", params=by_reward, headers=ADMIN).json()
    assert ([s["id"] for s in top["samples"]], top["total"]) == (["s:0"], None)
    assert top["next"] == "0.1~0.5"
    assert _ids(client, **by_reward, after=top["next"]) == ["s:1"]
    assert _ids(client, **by_reward, after="0.2~0.0") == ["tasks/swe/1"]  # no reward: last


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"colour": "red"}, "query.colour"),
        ({"trained": "yes"}, "query.trained"),
        ({"chosen": "1"}, "query.chosen"),
        ({"limit": "0"}, "query.limit"),
        ({"limit": "201"}, "query.limit"),
        ({"limit": "ten"}, "query.limit"),
        ({"kind": "image"}, "query.kind"),
        ({"order": "sideways"}, "query.order"),
        ({"after": "seven"}, "query.after"),
        ({"after": "0.1~0.5"}, "query.after"),  # a reward-order cursor in time order
        ({"sort": "reward", "before": "0.1"}, "query.before"),
        ({"after": "0.1", "last": "true"}, "query.last"),
        ({"reward_min": "high"}, "query.reward_min"),
        ({"text": ""}, "query.text"),
        ({"sort": "size"}, "query.sort"),
        ({"trainer": "nobody"}, "query.trainer"),
    ],
)
def test_a_refused_query_names_its_parameter(
    client: TestClient, query: dict[str, str], field: str
) -> None:
    answer = client.get("/reef/scenarios/support/samples", params=query, headers=ADMIN)
    assert answer.status_code == 400, answer.text
    assert [p["field"] for p in answer.json()["problems"]] == [field]


def test_a_parameter_given_twice_is_refused(client: TestClient) -> None:
    answer = client.get("/reef/scenarios/support/samples?kind=task&kind=task", headers=ADMIN)
    assert answer.status_code == 400
    assert answer.json()["problems"][0] == {"field": "query.kind", "reason": "given more than once"}


def test_a_sample_shows_where_it_came_from_and_the_jobs_that_consumed_it(
    client: TestClient, storage_database: Database
) -> None:
    """The records and report behind a sample, and each job that consumed it with the reward
    it trained with and what an extension (here, as Agent ECC writes it) said of it."""
    record_id, report_id = _scored_sample(client, storage_database)
    history = JobHistory(storage_database, "support")
    seal = {"epoch": {"index": 3, "version_id": "g3"}, "batch_id": "job-1"}
    verdict = {"outcome": "batch", "verdict": "pass", "decision": "reexec", "reward": 1.0,
               "recorded_reward": 0.5}  # fmt: skip
    history.submitted(
        "noop",
        "job-1",
        [SampleOfJob("s:0", True, 1.0, {"ecc": verdict}), SampleOfJob("s:1", False)],
        extensions={"ecc": seal},
    )
    history.ended("noop", "job-1", "finished", {"loss": 0.25, "consumed": [1]})

    detail = client.get("/reef/scenarios/support/samples/s:0", headers=ADMIN).json()
    assert detail["sample"]["id"] == "s:0"
    assert detail["body"]["feedback"] == "close"
    assert detail["body"]["trajectory"]["steps"][0]["source"] == "user"
    [record] = detail["records"]
    assert (record["id"], record["kind"], record["stored"], record["held"]) == (
        record_id, "inference", True, True,
    )  # fmt: skip
    assert record["at"] > 0
    report = detail["report"]
    assert (report["id"], report["score"], report["feedback"]) == (report_id, 0.5, "close")
    assert report["references"] == [record_id]
    assert (detail["upload"], detail["task"]) == (None, None)
    [job] = detail["jobs"]
    assert (job["job_id"], job["trainer"], job["event"]) == ("job-1", "noop", "finished")
    assert (job["trained"], job["reward"]) == (True, 1.0)
    assert job["extensions"] == {"ecc": verdict}
    assert job["job_extensions"] == {"ecc": seal}
    retired = client.get("/reef/scenarios/support/samples/s:1", headers=ADMIN).json()
    assert [(j["trained"], j["reward"]) for j in retired["jobs"]] == [(False, None)]

    jobs = client.get("/reef/scenarios/support/jobs", headers=ADMIN).json()["jobs"]
    assert [(j["job_id"], j["trained"], j["consumed"], j["reward_mean"]) for j in jobs] == [
        ("job-1", 1, 2, 1.0)
    ]
    assert jobs[0]["metrics"] == {"loss": 0.25}
    missing = client.get("/reef/scenarios/support/samples/nope", headers=ADMIN)
    assert missing.status_code == 404
    assert missing.json()["problems"][0]["field"] == "sample_id"


def test_a_failed_jobs_samples_show_as_consumed_by_it_not_trained(
    client: TestClient, storage_database: Database
) -> None:
    """rule: P-PIPE-10 -- a job its component failed consumed its samples (they never train
    again for that trainer) and trained none: the list, the detail and the history say so."""
    _scored_sample(client, storage_database)
    samples = TrainerSamples(storage_database, "support")
    history = JobHistory(storage_database, "support")
    history.submitted("noop", "job-1", [SampleOfJob("s:0", True, 0.5), SampleOfJob("s:1", True)])
    samples.commit_submission("noop", "job-1", ["s:0", "s:1"])
    samples.record_job_outcome(
        "noop",
        {"job_id": "job-1", "component": "noop", "event": "failed", "metrics": {},
         "error": "lost with its process"},
    )  # fmt: skip
    assert samples.train_counts("noop", ["s:0"]) == {"s:0": 1}  # consumed for good

    listed = client.get("/reef/scenarios/support/samples", headers=ADMIN).json()["samples"]
    assert [(s["id"], s["trained_by"], s["failed_by"]) for s in listed] == [
        ("s:0", {}, {"noop": 1}), ("s:1", {}, {"noop": 1})
    ]  # fmt: skip
    assert _ids(client, trained="true") == []
    assert _ids(client, trained="false") == ["s:0", "s:1"]
    [job] = client.get("/reef/scenarios/support/samples/s:0", headers=ADMIN).json()["jobs"]
    assert (job["event"], job["sent"], job["trained"]) == ("failed", True, False)
    [summary] = client.get("/reef/scenarios/support/jobs", headers=ADMIN).json()["jobs"]
    assert (summary["event"], summary["trained"], summary["sent"], summary["consumed"]) == (
        "failed", 0, 2, 2,
    )  # fmt: skip
    trainer = client.get("/reef/status", headers=ADMIN).json()["scenarios"][0]["trainers"][0]
    assert trainer["drops"] == {"failed_job": 2}


def test_an_upload_and_a_task_show_their_source(
    client: TestClient, storage_database: Database
) -> None:
    record = InferenceRecord(
        "c1",
        "support",
        {"messages": [{"role": "user", "content": "hello"}]},
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}]},
    )
    trajectory = trajectory_to_json(trajectory_from_records([record], trajectory_id="up/1"))
    # an item id with a "/" could never be read, attached or deleted by its path: refused
    refused = client.post("/reef/items", json={"trajectory": trajectory}, headers=GRADER)
    assert refused.status_code == 400
    assert refused.json()["problems"][0]["field"] == "$.trajectory.trajectory_id"
    trajectory["trajectory_id"] = "up-1"
    assert client.post("/reef/items", json={"trajectory": trajectory}, headers=GRADER).is_success
    assert client.post("/reef/scenarios/support/items/up-1", headers=GRADER).is_success
    upload = client.get("/reef/scenarios/support/samples/up-1", headers=ADMIN).json()
    assert upload["upload"] == {"item_id": "up-1", "stored": True}
    assert upload["records"] == []
    samples = TrainerSamples(storage_database, "support")
    samples.register_trainer("noop", reads_uploads=True)
    samples.add_samples(
        "noop", [NewSample("tasks/swe/1", "task", sample_body(TaskSample("tasks/swe/1", {})))]
    )
    # a sample id may hold "/": the route takes the rest of the path
    task = client.get("/reef/scenarios/support/samples/tasks/swe/1", headers=ADMIN).json()
    assert task["task"] == {"name": "tasks/swe/1", "split": "train"}


def test_the_job_history_pages_back_in_time(client: TestClient, storage_database: Database) -> None:
    history = JobHistory(storage_database, "support")
    for number in range(5):
        history.submitted("noop", f"job-{number}", [])
        history.ended("noop", f"job-{number}", "finished", {"loss": 1.0 / (number + 1)})
    history.submitted("noop", "job-5", [])  # running

    def page(**query: Any) -> dict[str, Any]:
        answer = client.get("/reef/scenarios/support/jobs", params=query, headers=ADMIN)
        assert answer.status_code == 200, answer.text
        found: dict[str, Any] = answer.json()
        return found

    latest = page(limit=2)
    assert [j["job_id"] for j in latest["jobs"]] == ["job-4", "job-5"]
    assert latest["jobs"][1]["event"] is None  # still running
    older = page(limit=2, before=latest["next"])
    assert [j["job_id"] for j in older["jobs"]] == ["job-2", "job-3"]
    oldest = page(limit=2, before=older["next"])
    assert ([j["job_id"] for j in oldest["jobs"]], oldest["next"]) == (["job-0", "job-1"], None)
    assert page(trainer="noop")["jobs"][0]["job_id"] == "job-0"
    refused = client.get("/reef/scenarios/support/jobs?before=x", headers=ADMIN)
    assert refused.json()["problems"][0]["field"] == "query.before"


def test_jobs_carry_their_number_note_and_learning_signal(
    client: TestClient, storage_database: Database
) -> None:
    """A job is numbered in the scenario's history, shows its TRAIN instruction's note, and
    says whether it had a learning signal: one whose every group trained with one reward had
    none (a group of one included); one without rewards is unknown. Its page lists its
    samples with their client's group; the series holds every finished job, as runs of jobs
    once the history is longer than the points asked for."""
    samples = TrainerSamples(storage_database, "support")
    samples.register_trainer("noop", reads_uploads=True)

    def body(reward: float | None, group: str) -> dict[str, Any]:
        metadata = {"report_metadata": {"group": group}}
        return sample_body(TrajectorySample({"steps": []}, reward=reward, metadata=metadata))

    for name, rewards in (("alike", (1.0, 1.0)), ("unlike", (0.0, 1.0)), ("none", (None, None))):
        unit = [
            NewSample(f"{name}:{i}", "trajectory", body(r, name)) for i, r in enumerate(rewards)
        ]
        samples.add_record_samples("noop", unit, [f"r-{name}"])
    samples.add_record_samples("noop", [NewSample("solo", "trajectory", body(0.5, "solo"))], ["x"])
    note = {"request_id": "note-1", "action": "TRAIN", "text": "only the good ones"}
    assert client.post(
        "/reef/scenarios/support/update", json={"training_mode": "manual"}, headers=ADMIN
    ).is_success
    assert client.post("/reef/scenarios/support/instructions", json=note, headers=ADMIN).is_success
    history = JobHistory(storage_database, "support")

    def job(job_id: str, members: list[str], loss: float, **kwargs: Any) -> None:
        sent = [SampleOfJob(m, True, body_reward(m)) for m in members]
        history.submitted("noop", job_id, sent, **kwargs)
        history.ended("noop", job_id, "finished", {"loss": loss, "note": "text is left out"})

    rewards = {"alike:0": 1.0, "alike:1": 1.0, "unlike:0": 0.0, "unlike:1": 1.0, "solo": 0.5}

    def body_reward(sample_id: str) -> float | None:
        return rewards.get(sample_id)

    job("j-flat", ["alike:0", "alike:1", "solo"], 0.0, instruction_id="note-1")
    job("j-moved", ["alike:0", "alike:1", "unlike:0", "unlike:1"], 0.25)
    job("j-sft", ["none:0", "none:1"], 1.5)
    jobs = client.get("/reef/scenarios/support/jobs", headers=ADMIN).json()["jobs"]
    assert [(j["number"], j["signal"]) for j in jobs] == [(1, False), (2, True), (3, None)]
    assert [j["instruction_text"] for j in jobs] == ["only the good ones", None, None]

    detail = client.get("/reef/scenarios/support/jobs/noop/j-flat", headers=ADMIN).json()
    assert (detail["job"]["number"], detail["job"]["signal"]) == (1, False)
    assert [(s["sample_id"], s["group"], s["reward"]) for s in detail["samples"]] == [
        ("alike:0", "alike", 1.0), ("alike:1", "alike", 1.0), ("solo", "solo", 0.5),
    ]  # fmt: skip
    missing = client.get("/reef/scenarios/support/jobs/noop/nope", headers=ADMIN)
    assert missing.status_code == 404
    assert (
        client.get("/reef/scenarios/support/jobs/nobody/j-flat", headers=ADMIN).status_code == 400
    )

    # A sample trained only with alike groups says so in the list and opened.
    listed = {
        s["id"]: s
        for s in client.get("/reef/scenarios/support/samples", headers=ADMIN).json()["samples"]
    }
    assert (listed["alike:0"]["group"], listed["alike:0"]["group_id"]) == ("alike", "alike:0")
    assert listed["unlike:0"]["no_signal_by"] == {}
    opened = client.get("/reef/scenarios/support/samples/alike:0", headers=ADMIN).json()
    assert [(j["number"], j["signal"]) for j in opened["jobs"]] == [(1, False), (2, False)]
    opened = client.get("/reef/scenarios/support/samples/unlike:1", headers=ADMIN).json()
    assert [(j["number"], j["signal"]) for j in opened["jobs"]] == [(2, True)]

    for number in range(4, 11):
        job(f"j-{number}", ["unlike:0", "unlike:1"], float(number))
    series = client.get(
        "/reef/scenarios/support/job_series", params={"points": 4}, headers=ADMIN
    ).json()
    assert (series["jobs"], series["no_signal"]) == ({"noop": 10}, {"noop": 1})
    assert series["metrics"] == ["loss", "reward_mean", "samples_trained"]
    points = series["trainers"]["noop"]
    assert [(p["first"], p["last"], p["jobs"]) for p in points] == [
        (1, 3, 3),
        (4, 6, 3),
        (7, 9, 3),
        (10, 10, 1),
    ]
    assert (points[0]["mean"]["loss"], points[0]["low"]["loss"], points[0]["high"]["loss"]) == (
        (0.0 + 0.25 + 1.5) / 3, 0.0, 1.5,
    )  # fmt: skip
    assert (points[0]["no_signal"], points[-1]["job_id"]) == (1, "j-10")
    refused = client.get("/reef/scenarios/support/job_series?points=1", headers=ADMIN)
    assert refused.json()["problems"][0]["field"] == "query.points"


def test_the_artifact_curve_answers_each_artifacts_mean_reward(
    client: TestClient, storage_database: Database
) -> None:
    """The route of the console's artifact curve: each artifact's samples and their mean
    reward, the artifacts in the order they first answered; ``limit`` bounded."""
    samples = TrainerSamples(storage_database, "support")
    samples.register_trainer("noop", reads_uploads=True)
    for n, (artifact, reward) in enumerate([("art-1", 0.0), ("art-1", 0.5), ("art-2", 1.0)]):
        record = InferenceRecord(
            f"c{n}", "support", {"messages": [{"role": "user", "content": "hi"}]}, {},
            artifact_id=artifact,
        )  # fmt: skip
        trajectory = trajectory_to_json(trajectory_from_records([record], trajectory_id="t"))
        sample = TrajectorySample(trajectory, reward=reward)
        samples.add_record_samples(
            "noop", [NewSample(f"s{n}", "trajectory", sample_body(sample))], [record.id]
        )
    answer = client.get("/reef/scenarios/support/artifact_rewards", headers=ADMIN)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["total"] == 2
    assert [
        (a["artifact_id"], a["number"], a["samples"], a["mean_reward"]) for a in body["artifacts"]
    ] == [("art-1", 1, 2, 0.25), ("art-2", 2, 1, 1.0)]
    refused = client.get("/reef/scenarios/support/artifact_rewards?limit=0", headers=ADMIN)
    assert refused.status_code == 400
    assert "query.limit" in refused.text


def test_no_data_route_answers_without_a_token(client: TestClient) -> None:
    """Every route the document marks with a scope refuses a call without a token (401) and one
    whose token lacks the scope (403): the console's routes are no exception."""
    document = client.get("/openapi.json").json()
    checked = 0
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if "x-reef-scope" not in operation:
                continue
            url = path.replace("{scenario}", "support").replace("{item_id}", "i")
            url = url.replace("{sample_id}", "s")
            # A body, when the route reads one, declared JSON as it must be (else 415).
            json_body = {"content-type": "application/json"} if "requestBody" in operation else {}
            answer = client.request(method.upper(), url, headers=json_body)
            assert answer.status_code == 401, (method, path)
            checked += 1
            if operation["x-reef-scope"] == "admin":
                lacking = client.request(method.upper(), url, headers=GRADER | json_body)
                assert lacking.status_code == 403, (method, path)
    assert checked >= 17
    # What the console reads needs admin, in the document and in fact: a grader's token
    # (infer, feedback) reads none of it.
    for path in ("samples", "samples/{sample_id}", "jobs", "buffer"):
        operation = document["paths"][f"/reef/scenarios/{{scenario}}/{path}"]["get"]
        assert operation["x-reef-scope"] == "admin", path
    for url in ("/samples", "/samples/s", "/jobs", "/buffer"):
        refused = client.get(f"/reef/scenarios/support{url}", headers=GRADER)
        assert refused.status_code == 403, url
        assert refused.json()["problems"][0]["reason"] == "token 'grader' lacks the 'admin' scope"
    for url in ("/reef/scenarios/support/samples", "/reef/scenarios/support/jobs"):
        limited = client.get(url, headers=BILLING_ADMIN)
        assert limited.status_code == 403
        assert "support" in limited.json()["message"]
        assert client.get(url.replace("support", "billing"), headers=BILLING_ADMIN).is_success


def test_the_console_page_is_served_without_a_token_and_holds_no_data(
    client: TestClient,
) -> None:
    page = client.get("/reef/console", follow_redirects=False)
    assert page.status_code in (307, 308)
    assert page.headers["location"].endswith("/reef/console/")
    index = client.get("/reef/console/")
    assert index.status_code == 200
    assert index.headers["content-type"].startswith("text/html")
    policy = index.headers["content-security-policy"]
    assert "script-src 'self'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "support" not in index.text  # no scenario, no data: only the page
    script = client.get("/reef/console/app.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert "Bearer" not in script.text  # the token is sent by api.js, never written in
    assert client.get("/reef/console/api.js").text.count("sessionStorage") >= 1
    assert client.get("/reef/console/nope.js").status_code == 404
    assert client.get("/reef/console/..%2Fopenapi.json").status_code == 404
    documented = client.get("/openapi.json").json()["paths"]
    assert not [path for path in documented if path.startswith("/reef/console")]


def test_without_auth_the_console_page_answers_loopback_clients_only(
    storage_url: str, storage_database: Database, engine_url: str
) -> None:
    text = DEPLOYMENT.split("auth:\n")[0] + "scenarios:\n" + DEPLOYMENT.split("\nscenarios:\n")[1]
    app = service_app(
        text % {"url": storage_url, "engine": engine_url},
        storage_url,
        storage_database,
        options=ServerOptions(allow_unauthenticated=True),
    )
    # Its peer is "testclient", not loopback (though the Host names loopback).
    with TestClient(app, base_url="http://127.0.0.1") as remote:
        refused = remote.get("/reef/console/")
        assert refused.status_code == 403
        assert refused.json()["problems"][0]["field"] == "client"
    with TestClient(app, base_url="http://127.0.0.1", client=("127.0.0.1", 50000)) as local:
        assert local.get("/reef/console/").status_code == 200
        assert local.get("/reef/scenarios/support/samples").status_code == 200
