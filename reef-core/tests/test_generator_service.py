"""The generator service (``reef.record2sample.generator``) through the HTTP API: staging by
name, verifier and oracle runs in the sandbox, hint plays on the scenario's engine that leave
no record, restaging from the task store, and its auth."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from doubles.generators import ArithmeticTasks, WordTasks
from starlette.testclient import TestClient

from reef.recipe.generated_tasks.processor import GeneratedTaskJobData, GeneratedTaskSamples
from reef.server import ServiceConfigError
from reef.storage import Database, RecordStore, TaskStorage
from reef.testing import pipeline_context, training_pipeline
from reef.testing.service import ServiceToken, auth_section, serve_on_loopback, service_app
from reef.testing.task_engines import hint_policy
from reef.testing.tasks import arithmetic_task

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup does)"
)

TOKENS = (
    ServiceToken("admin", ("infer", "feedback", "admin")),
    ServiceToken("agent", ("infer",)),
)
ADMIN, AGENT = (token.headers for token in TOKENS)
BASE = "/reef/scenarios/support/generator"

DEPLOYMENT = (
    """
storage: {url: "%(url)s"}
serving: {engine: "%(engine)s/v1"}
"""
    + auth_section(*TOKENS)
    + """%(generator)sscenarios:
  support:
    recipe: servicetest
    training: %(training)s
"""
)


@pytest.fixture(scope="module")
def policy_url() -> Iterator[str]:
    with serve_on_loopback(hint_policy()) as url:
        yield url


def app_for(
    url: str,
    database: Database,
    engine: str,
    tasks_root: Path | None,
    training: str = "{component: noop}",
) -> Any:
    generator = ""
    if tasks_root is not None:
        limits = "{timeout_seconds: 20, memory_mb: 256}"
        generator = f'generator: {{tasks_root: "{tasks_root}", containers: {limits}}}\n'
    text = DEPLOYMENT % {
        "url": url, "engine": engine, "generator": generator, "training": training
    }  # fmt: skip
    return service_app(text, url, database)


@pytest.fixture
def client(
    storage_url: str, storage_database: Database, policy_url: str, tmp_path: Path
) -> Iterator[TestClient]:
    with TestClient(app_for(storage_url, storage_database, policy_url, tmp_path / "tasks")) as c:
        yield c


TASK = arithmetic_task("add-17-25", 17, 25)


def test_staging_the_same_task_again_under_its_name_returns_the_staged_copy(
    client: TestClient, tmp_path: Path
) -> None:
    # rule: P-TASK-26
    first = client.post(f"{BASE}/tasks", json={"task": TASK}, headers=ADMIN)
    assert first.status_code == 200, first.text
    again = client.post(f"{BASE}/tasks", json={"task": TASK}, headers=ADMIN)
    assert again.json() == first.json() == {"name": "add-17-25", "digest": first.json()["digest"]}
    assert (tmp_path / "tasks" / "support" / "add-17-25" / "tests" / "test.sh").is_file()
    other = {**TASK, "files": {**TASK["files"], "instruction.md": "What is 17 + 26?"}}
    clash = client.post(f"{BASE}/tasks", json={"task": other}, headers=ADMIN)
    assert clash.status_code == 409
    assert "stands for one task" in clash.text


def test_a_task_that_would_escape_its_folder_is_refused_and_nothing_is_staged(
    client: TestClient, tmp_path: Path
) -> None:
    bad = {**TASK, "files": {**TASK["files"], "../outside.sh": "echo"}}
    refused = client.post(f"{BASE}/tasks", json={"task": bad}, headers=ADMIN)
    assert refused.status_code == 400
    assert "no '..'" in refused.text
    assert not (tmp_path / "tasks" / "support").exists()
    assert not (tmp_path / "tasks" / "outside.sh").exists()


def test_the_oracle_passes_and_an_attempt_is_scored(client: TestClient) -> None:
    oracle = client.post(f"{BASE}/verify", json={"task": TASK, "oracle": True}, headers=ADMIN)
    assert oracle.status_code == 200, oracle.text
    assert oracle.json()["reward"] == 1.0
    wrong = client.post(
        f"{BASE}/verify", json={"task": TASK, "attempt": {"answer.txt": "41"}}, headers=ADMIN
    )
    assert (wrong.json()["reward"], wrong.json()["timed_out"]) == (0.0, False)


def test_hint_plays_run_on_the_engine_and_are_no_records(
    client: TestClient, storage_database: Database
) -> None:
    # rule: P-TASK-18 — rollouts run through the generator service are not records and do not
    # train.
    plain = client.post(f"{BASE}/play", json={"task": TASK, "rollouts": 2}, headers=ADMIN)
    assert plain.status_code == 200, plain.text
    assert [(p["reply"], p["verdict"]["reward"]) for p in plain.json()["plays"]] == [
        ("0", 0.0),
        ("0", 0.0),
    ]
    hinted = client.post(
        f"{BASE}/play",
        json={"task": TASK, "rollouts": 1, "hint": "carry the one: 42"},
        headers=ADMIN,
    )
    assert [(p["reply"], p["verdict"]["reward"]) for p in hinted.json()["plays"]] == [("42", 1.0)]
    assert RecordStore(storage_database, "support").read_after(None) == []


def test_a_service_restarted_with_an_empty_tasks_root_runs_a_saved_task(
    storage_url: str, storage_database: Database, policy_url: str, tmp_path: Path
) -> None:
    # rule: P-TASK-26 — the task store is the source of each task; the tasks root holds copies.
    store = TaskStorage(storage_database, "support").open("generated-tasks")
    store.put("task:add-17-25", {"generation": 0, "split": "train", "task": TASK})
    for attempt in range(2):
        shutil.rmtree(tmp_path / "tasks", ignore_errors=True)
        with TestClient(
            app_for(storage_url, storage_database, policy_url, tmp_path / "tasks")
        ) as c:
            verdict = c.post(
                f"{BASE}/verify",
                json={"task_name": "add-17-25", "attempt": {"answer.txt": "42"}},
                headers=ADMIN,
            )
            assert verdict.status_code == 200, (attempt, verdict.text)
            assert verdict.json()["reward"] == 1.0
            missing = c.post(
                f"{BASE}/verify", json={"task_name": "nowhere", "oracle": True}, headers=ADMIN
            )
            assert missing.status_code == 404
            assert "no saved task 'nowhere'" in missing.text


def test_the_service_needs_the_admin_scope_and_a_generator_section(
    client: TestClient, storage_url: str, storage_database: Database, policy_url: str
) -> None:
    assert client.post(f"{BASE}/tasks", json={"task": TASK}).status_code == 401
    assert client.post(f"{BASE}/tasks", json={"task": TASK}, headers=AGENT).status_code == 403
    both = client.post(f"{BASE}/tasks", json={"task": TASK, "task_name": "x"}, headers=ADMIN)
    assert both.status_code == 400
    assert "exactly one of task and task_name" in both.text
    with TestClient(app_for(storage_url, storage_database, policy_url, None)) as without:
        answer = without.post(f"{BASE}/tasks", json={"task": TASK}, headers=ADMIN)
        assert answer.status_code == 404
        assert "no generator section" in answer.text


def test_a_generator_section_whose_backend_cannot_run_stops_the_service(
    storage_url: str, storage_database: Database, policy_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on this PATH
    with pytest.raises(ServiceConfigError, match="needs bubblewrap"):
        app_for(storage_url, storage_database, policy_url, tmp_path / "tasks")


def test_the_service_stages_again_a_task_that_any_trainer_of_the_scenario_saved(
    storage_url: str, storage_database: Database, policy_url: str, tmp_path: Path
) -> None:
    # rule: P-TASK-26 — in a scenario of several trainers each trainer's stage keeps its tasks
    # in its own store (<trainer>:generated-tasks); the service looks in every one of them.
    trainers = ("small", "wide")
    storage = TaskStorage(storage_database, "support")
    stages = []
    try:
        for trainer, generator in zip(trainers, (ArithmeticTasks(), WordTasks()), strict=True):
            context = pipeline_context(
                "support", trainer, trainers=trainers, task_storage=storage,
                has_runtime_loader=False,
            )  # fmt: skip
            stage = GeneratedTaskSamples(context, generator, rounds=1)
            stages.append(stage)
            jobs = GeneratedTaskJobData(context, record2sample=stage)
            pipeline = training_pipeline(stage, jobs, storage_database)
            pipeline.produce()
            while stage.background_jobs_running():
                stage.worker.wait(10)
                pipeline.produce()
        assert storage.open("small:generated-tasks").get("task:add-g1-0") is not None
        assert storage.open("wide:generated-tasks").get("task:reverse-g1-1") is not None
    finally:
        for stage in stages:
            stage.close(10)
    # The service of a deployment whose scenario lists both trainers, its tasks root empty.
    training = "[{component: noop, name: small}, {component: noop, name: wide}]"
    app = app_for(storage_url, storage_database, policy_url, tmp_path / "tasks", training)
    with TestClient(app) as c:
        for name in ("add-g1-0", "reverse-g1-1"):  # one of each trainer's
            verdict = c.post(
                f"{BASE}/verify", json={"task_name": name, "oracle": True}, headers=ADMIN
            )
            assert verdict.status_code == 200, (name, verdict.text)
            assert verdict.json()["reward"] == 1.0, (name, verdict.text)
        missing = c.post(
            f"{BASE}/verify", json={"task_name": "add-g9-0", "oracle": True}, headers=ADMIN
        )
        assert missing.status_code == 404
        assert "no saved task 'add-g9-0'" in missing.text


def test_a_task_toml_that_cannot_be_read_is_a_400_naming_the_file_on_every_route(
    client: TestClient, storage_database: Database, tmp_path: Path
) -> None:
    deep = {**TASK, "name": "deep", "files": {**TASK["files"], "task.toml": "a = " + "[" * 50_000}}
    for route, body in (
        ("tasks", {"task": deep}),
        ("verify", {"task": deep, "oracle": True}),
        ("play", {"task": deep, "rollouts": 1}),
    ):
        answer = client.post(f"{BASE}/{route}", json=body, headers=ADMIN)
        assert answer.status_code == 400, (route, answer.text)
        assert "task 'deep': task.toml" in answer.text, (route, answer.text)
        assert "nested too deeply" in answer.text, (route, answer.text)
    assert not (tmp_path / "tasks" / "support" / "deep").exists(), "nothing is staged"
    # A saved task, restaged by name, and a copy staged before task.toml was checked.
    store = TaskStorage(storage_database, "support").open("generated-tasks")
    store.put("task:deep", {"generation": 0, "split": "train", "task": deep})
    by_name = client.post(f"{BASE}/verify", json={"task_name": "deep", "oracle": True},
                          headers=ADMIN)  # fmt: skip
    assert by_name.status_code == 400, by_name.text
    assert "task 'deep': task.toml" in by_name.text
    staged = client.post(f"{BASE}/tasks", json={"task": TASK}, headers=ADMIN)
    assert staged.status_code == 200, staged.text
    (tmp_path / "tasks" / "support" / "add-17-25" / "task.toml").write_text("x = [[[")
    old = client.post(f"{BASE}/verify", json={"task_name": "add-17-25", "oracle": True},
                      headers=ADMIN)  # fmt: skip
    assert old.status_code == 400, old.text
    assert "task 'add-17-25': task.toml is not valid TOML" in old.text


def test_a_verifier_that_fills_its_memory_gets_no_reward_and_the_answer_says_why(
    client: TestClient, tmp_path: Path
) -> None:
    fill = "for i in 1 2 3 4 5; do head -c 60M /dev/zero > /tmp/f$i; done\n"
    hog = {**TASK, "name": "hog", "files": {**TASK["files"],
           "tests/test.sh": fill + "echo 1 > /logs/verifier/reward.txt\n"}}  # fmt: skip
    answer = client.post(f"{BASE}/verify", json={"task": hog, "oracle": True}, headers=ADMIN)
    assert answer.status_code == 200, answer.text
    assert answer.json()["reward"] is None
    assert answer.json()["output"].endswith(
        "reef: the run reached its memory limit of 256 MiB (/tmp counts against it): writing "
        "more failed, so it gives no reward\n"
    )
    assert not list((tmp_path / "tasks" / ".runs").glob("*")), "nothing of the run is left"
