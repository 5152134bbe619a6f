"""End to end over real HTTP on loopback: one scenario trained by two ``local`` components.

``reef serve`` runs as a subprocess with a deployment whose ``training`` lists two entries of
the ``local`` component (``small``, which the local engine serves, and ``wide``, with its own
state folder and learning rate). A scripted agent calls the engine and a grader reports each
answer. Both trainers train every reported sample exactly once, each publishes its own
artifacts, every call is answered by the served trainer's weights, and the status shows each
trainer. A second scenario (``sft``, no engine) takes uploaded trajectories: each of its two
trainers trains every upload once.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from textwrap import indent
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, text

from reef.core.atif import trajectory_to_json
from reef.core.atif_build import trajectory_from_records
from reef.core.records import InferenceRecord
from reef.testing.serve import REEF, TINY_GPT_OPTIONS, ScriptedAgent, ServeProcess as Serve

pytest.importorskip("torch")

SCENARIO = "word"
GROUP = 4
ROUNDS = 4  # 16 reports: two jobs of 8 samples for each trainer
TRAINERS = ("small", "wide")

DEPLOYMENT = """
storage:
  url: "{url}"
serving:
  engine: local
scenarios:
  word:
    recipe: grouped
    pipeline:
      record2sample: {{config: {{group_size: 4, max_staleness: 3}}}}
      sample2job: {{config: {{job_samples: 8}}}}
    training:
      - component: local
        name: small
        serves: true
        options:
          state_dir: "{folder}/small"
          batch_size: 4
          learning_rate: 0.01
{model}
      - component: local
        name: wide
        options:
          state_dir: "{folder}/wide"
          batch_size: 8
          learning_rate: 0.001
{model}
"""


def _deployment(folder: Path, url: str) -> Path:
    path = folder / "deployment.yaml"
    path.write_text(
        # The options of a list entry sit two columns deeper than a single component's.
        DEPLOYMENT.format(url=url, folder=folder, model=indent(TINY_GPT_OPTIONS, "  ")),
        encoding="utf-8",
    )
    return path


def _trainers(base_url: str) -> dict[str, dict[str, Any]]:
    status = httpx.get(f"{base_url}/reef/status", timeout=10).json()
    (scenario,) = status["scenarios"]
    return {trainer["trainer"]: trainer for trainer in scenario["trainers"]}


def _wait(condition: Any, timeout: float, what: str, base_url: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}: {_trainers(base_url)}")


def _done(base_url: str) -> bool:
    trainers = _trainers(base_url)
    return all(
        (trainers[name]["jobs_ended"] or 0) >= 2
        and trainers[name]["pipeline"].get("ready_samples") == 0
        and trainers[name]["running_job"] is None
        for name in TRAINERS
    )


def _stored(url: str) -> dict[str, Any]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            samples = connection.execute(
                text("SELECT id, trainer, body FROM reef_samples WHERE scenario = :s"),
                {"s": SCENARIO},
            ).all()
            trains = connection.execute(
                text(
                    "SELECT s.id, t.trainer, t.count FROM reef_sample_trains t"
                    " JOIN reef_samples s ON t.sample_seq = s.seq WHERE s.scenario = :s"
                ),
                {"s": SCENARIO},
            ).all()
            submissions = connection.execute(
                text(
                    "SELECT trainer, count(*) FROM reef_submissions WHERE scenario = :s"
                    " GROUP BY trainer"
                ),
                {"s": SCENARIO},
            ).all()
            records = connection.execute(
                text("SELECT body FROM reef_records WHERE scenario = :s AND kind = 'inference'"),
                {"s": SCENARIO},
            ).scalars()
            answered = [json.loads(body)["artifact_id"] for body in records]
    finally:
        engine.dispose()
    return {
        "samples": [(row.id, row.trainer, json.loads(row.body)["report_id"]) for row in samples],
        "trains": [(row.id, row.trainer, row.count) for row in trains],
        "submissions": dict(submissions),
        "answered": answered,
    }


def _artifacts(folder: Path) -> set[str]:
    """The artifact ids a local component's state folder holds."""
    return {f"sha256:{p.name}" for p in (folder / "artifacts").iterdir() if p.is_dir()}


def test_two_components_each_train_every_reported_sample_once(tmp_path: Path) -> None:
    """rule: P-PIPE-19 P-SET-18 one trainer per component: both trainers read the same reports,
    each trains every sample once (its own consumption), each publishes its own weights."""
    url = f"sqlite:///{tmp_path / 'reef.db'}"
    deployment = _deployment(tmp_path, url)
    agent = ScriptedAgent(SCENARIO, GROUP)
    serve = Serve(deployment, tmp_path / "serve.log")
    try:
        _wait(
            lambda: all(t["served_artifact"] for t in _trainers(serve.base_url).values()),
            60,
            "both trainers' first weights",
            serve.base_url,
        )
        initial = {name: t["served_artifact"] for name, t in _trainers(serve.base_url).items()}
        for _ in range(ROUNDS):
            agent.round(serve.base_url)
        _wait(lambda: _done(serve.base_url), 180, "both trainers' jobs", serve.base_url)
        trainers = _trainers(serve.base_url)
        table = subprocess.run(
            [REEF, "status", "--url", serve.base_url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert serve.terminate() == 0
    finally:
        if serve.process.poll() is None:
            serve.kill()

    # The status shows each trainer, in the file's order, with its own figures, its component
    # and whether the engine answers with its artifacts.
    assert list(trainers) == list(TRAINERS)
    for name in TRAINERS:
        assert trainers[name]["jobs_ended"] == 2, trainers[name]
        assert trainers[name]["component"] == "local"
    assert trainers["small"]["serves"] is True
    assert trainers["wide"]["serves"] is False
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()]
    assert [row[1] for row in rows if row and row[0] == SCENARIO] == list(TRAINERS)
    assert (
        f"{SCENARIO}: the engine answers with trainer small's artifacts; the other trainers'"
        " artifacts answer no call"
    ) in table.stdout.splitlines()

    stored = _stored(url)
    # Each trainer made its own sample of every report, its id prefixed with the trainer.
    for name in TRAINERS:
        made = [(sid, report) for sid, trainer, report in stored["samples"] if trainer == name]
        assert sorted(report for _, report in made) == sorted(agent.reports)
        assert all(sid.startswith(f"{name}:") for sid, _ in made), made
    assert len(stored["samples"]) == len(TRAINERS) * len(agent.reports)
    # Each trainer trained each of its samples once, and none of the other's.
    assert sorted(stored["trains"]) == sorted(
        (sid, trainer, 1) for sid, trainer, _ in stored["samples"]
    )
    assert stored["submissions"] == dict.fromkeys(TRAINERS, 2)

    # Each publishes its own artifacts; the engine answered only with the served trainer's.
    small, wide = _artifacts(tmp_path / "small"), _artifacts(tmp_path / "wide")
    # Both start from the same TinyGPT (one config, one seed): the same weights, the same id.
    assert initial["small"] == initial["wide"]
    trained_small, trained_wide = small - {initial["small"]}, wide - {initial["wide"]}
    assert len(trained_small) == 2  # one per job
    assert len(trained_wide) == 2
    assert not trained_small & trained_wide
    for name, held in (("small", small), ("wide", wide)):
        latest = (tmp_path / name / "artifacts" / "LATEST").read_text().strip()
        assert latest in held
        assert trainers[name]["served_artifact"] == latest
    assert len(stored["answered"]) == len(agent.reports)
    assert set(stored["answered"]) <= small
    assert not set(stored["answered"]) & trained_wide


UPLOADS = """
storage:
  url: "{url}"
scenarios:
  notes:
    recipe: sft
    pipeline:
      sample2job: {{config: {{job_samples: 4}}}}
    training:
      - component: local
        name: one
        options:
          state_dir: "{folder}/one"
          batch_size: 4
{model}
      - component: local
        name: two
        options:
          state_dir: "{folder}/two"
          batch_size: 2
{model}
"""


def _trajectory(trajectory_id: str) -> dict[str, Any]:
    """An ATIF trajectory of one exchange, with an agent step to train."""
    record = InferenceRecord(
        f"{trajectory_id}.c",
        "notes",
        {"messages": [{"role": "user", "content": f"note {trajectory_id}"}]},
        {"choices": [{"index": 0, "message": {"role": "assistant", "content": "noted"}}]},
    )
    return trajectory_to_json(trajectory_from_records([record], trajectory_id=trajectory_id))


def test_each_trainer_that_accepts_uploads_trains_every_upload_once(tmp_path: Path) -> None:
    """rule: P-UP-7 P-PIPE-19 an uploaded trajectory is one stored sample of no trainer, and
    each trainer of the scenario that accepts uploads trains it once."""
    url = f"sqlite:///{tmp_path / 'reef.db'}"
    deployment = tmp_path / "deployment.yaml"
    deployment.write_text(
        UPLOADS.format(url=url, folder=tmp_path, model=indent(TINY_GPT_OPTIONS, "  ")),
        encoding="utf-8",
    )
    uploads = [f"t{number}" for number in range(8)]  # two jobs of 4 for each trainer
    serve = Serve(deployment, tmp_path / "serve.log")
    try:
        for trajectory_id in uploads:
            created = httpx.post(
                f"{serve.base_url}/reef/items",
                json={"trajectory": _trajectory(trajectory_id)},
                timeout=30,
            )
            assert created.status_code == 201, created.text
            attached = httpx.post(
                f"{serve.base_url}/reef/scenarios/notes/items/{trajectory_id}", timeout=30
            )
            assert attached.status_code == 201, attached.text

        def trained() -> bool:
            status = httpx.get(f"{serve.base_url}/reef/status", timeout=10).json()
            (scenario,) = status["scenarios"]
            return all(
                (t["jobs_ended"] or 0) >= 2 and t["running_job"] is None
                for t in scenario["trainers"]
            )

        deadline = time.monotonic() + 180
        while not trained():
            assert time.monotonic() < deadline, "timed out waiting for both trainers' jobs"
            time.sleep(0.2)
        assert serve.terminate() == 0
    finally:
        if serve.process.poll() is None:
            serve.kill()

    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            samples = connection.execute(
                text("SELECT id, trainer, origin FROM reef_samples WHERE scenario = 'notes'")
            ).all()
            trains = connection.execute(
                text(
                    "SELECT s.id, t.trainer, t.count FROM reef_sample_trains t"
                    " JOIN reef_samples s ON t.sample_seq = s.seq WHERE s.scenario = 'notes'"
                )
            ).all()
    finally:
        engine.dispose()
    # One stored sample per upload, of no trainer; each trainer trained each of them once.
    assert sorted((row.id, row.trainer, row.origin) for row in samples) == [
        (trajectory_id, None, "upload") for trajectory_id in sorted(uploads)
    ]
    assert sorted((row.id, row.trainer, row.count) for row in trains) == sorted(
        (trajectory_id, trainer, 1) for trajectory_id in uploads for trainer in ("one", "two")
    )
