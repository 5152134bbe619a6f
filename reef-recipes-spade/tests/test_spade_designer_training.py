"""SPADE's designer trained on its hint-based regret, as spade-rl/spade trains it: the designer
is served by a Reef scenario (its calls recorded there), SPADE asks it for one task a call and
reports each call with ``R(with hint) - R(without hint)`` of its task (0 for an invalid
proposal), and that scenario's ``grouped`` recipe trains the designer on the regrets centred in
their generation's group, with the local component, in a real ``reef serve``."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from reef import PluginConfigError, TaskGenerationRequest
from reef.testing.serve import ServeProcess
from reef.testing.service import serve_on_loopback
from reef.testing.task_engines import (
    designed_sum_task,
    generator_service,
    hint_policy,
    scripted_designer,
)
from reef_spade.designer import DesignerError
from reef_spade.generator import SpadeGenerator
from reef_spade.regret import designer_scenario, regret

pytest.importorskip("torch")
pytest.importorskip("starlette")
pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (reef's scripts/setup does)"
)

_DESIGNER_DEPLOYMENT = """
storage: {{url: "sqlite:///{folder}/designer.db"}}
serving: {{engine: "{designer}/v1"}}
scenarios:
  designer:
    recipe: grouped
    pipeline:
      record2sample: {{config: {{group_size: 4}}}}
      sample2job: {{config: {{job_samples: 4}}}}
    training:
      component: local
      options:
        state_dir: "{folder}/designer-state"
        d_model: 32
        n_layers: 1
        n_heads: 2
        max_seq_len: 4096
        batch_size: 4
"""


def one_task(task: dict[str, str]) -> str:
    return json.dumps({"tasks": [task]})


def test_regret_is_the_hinted_mean_less_the_unhinted_floored_at_zero() -> None:
    assert regret([0.0, 0.0], [1.0, 1.0]) == 1.0
    assert regret([1.0, 0.0], [1.0, None]) == 0.0
    assert regret([0.0, None, 0.5, 0.5], [1.0, 1.0, 0.0, 0.0]) == pytest.approx(0.25)
    assert regret([1.0], [0.0]) == 0.0  # a hint that hurts is not negative regret


def test_the_designer_must_be_a_reef_scenario_to_be_trained() -> None:
    assert designer_scenario("http://reef:8080/scenarios/designer/v1") == (
        "http://reef:8080",
        "designer",
    )
    assert designer_scenario("http://vllm:8000/v1") is None
    with pytest.raises(PluginConfigError, match="<reef>/scenarios/<scenario>/v1"):
        SpadeGenerator.from_config(
            {"designer": {"url": "http://vllm:8000/v1", "report_regret": True}},
            scenario="tasks",
            environ={"REEF_GENERATOR_URL": "http://127.0.0.1:9"},
        )


def test_a_designer_reef_does_not_record_cannot_be_trained(tmp_path: Path) -> None:
    reply = one_task(designed_sum_task("frontier", 17, 25))
    with serve_on_loopback(scripted_designer([reply])) as designer_url:
        # The stand-in's path has the shape of a scenario's, but it is not Reef: no record id.
        spade = SpadeGenerator.from_config(
            {"designer": {"url": f"{designer_url}/scenarios/x/v1", "report_regret": True}},
            scenario="tasks",
            environ={"REEF_GENERATOR_URL": "http://127.0.0.1:9"},
        )
        spade.designer._url = f"{designer_url}/v1/chat/completions"  # the stand-in's route
        with pytest.raises(DesignerError, match="x-reef-record-id"):
            asyncio.run(spade.generate(TaskGenerationRequest(generation=1)))


def _finished_jobs(base_url: str) -> list[dict[str, Any]]:
    answer = httpx.get(f"{base_url}/reef/scenarios/designer/jobs", timeout=10)
    answer.raise_for_status()
    return [job for job in answer.json()["jobs"] if job["event"]]


def test_the_designer_trains_on_each_calls_regret_centred_in_its_generation(
    tmp_path: Path,
) -> None:
    replies = [
        one_task(designed_sum_task("frontier", 17, 25)),  # solved only with the hint: regret 1
        one_task(designed_sum_task("too-easy", 0, 0)),  # solved either way: regret 0
        one_task(designed_sum_task("broken-oracle", 17, 26, oracle=42)),  # invalid: 0
        "I would rather not.",  # no task at all: 0
    ]
    designer_requests: list[Any] = []
    (tmp_path / "tasks").mkdir()
    with (
        serve_on_loopback(scripted_designer(replies, designer_requests)) as designer_url,
        serve_on_loopback(hint_policy()) as policy_url,
        generator_service(tmp_path / "tasks", policy_url) as service_url,
    ):
        deployment = tmp_path / "designer.yaml"
        deployment.write_text(
            _DESIGNER_DEPLOYMENT.format(folder=tmp_path, designer=designer_url), encoding="utf-8"
        )
        serve = ServeProcess(deployment, tmp_path / "serve.log")
        try:
            spade = SpadeGenerator.from_config(
                {
                    "designer": {
                        "url": f"{serve.base_url}/scenarios/designer/v1",
                        "report_regret": True,
                        "max_tokens": 64,
                    },
                    "tasks_per_generation": 4,
                    "plays": 2,
                },
                scenario="tasks",
                environ={"REEF_GENERATOR_URL": service_url},
            )
            tasks = asyncio.run(spade.generate(TaskGenerationRequest(generation=5)))
            assert len(designer_requests) == 4  # one task a call
            assert "Write 1 new task:" in designer_requests[0]["messages"][0]["content"]
            assert len(tasks) == 3  # the reply without a task was reported at once
            verdicts = {t.name.split("-")[3]: asyncio.run(spade.validate(t)) for t in tasks}
            assert sorted(len(v.errors) for v in verdicts.values()) == [0, 1, 1]
            # A retried validation reports nothing twice (the report id is the call's).
            asyncio.run(spade.validate(tasks[0]))
            deadline = time.monotonic() + 120
            while not _finished_jobs(serve.base_url):
                assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
                time.sleep(0.3)
            (job,) = _finished_jobs(serve.base_url)
            assert job["event"] == "finished", job
            samples = httpx.get(
                f"{serve.base_url}/reef/scenarios/designer/samples", timeout=10
            ).json()
            trained = samples["samples"]
            assert len(trained) == 4
            assert len({sample["group"] for sample in trained}) == 1  # the generation's group
            assert sorted(sample["reward"] for sample in trained) == [0.0, 0.0, 0.0, 1.0]
            assert all(sample["trained_by"] == {"local": 1} for sample in trained)
            # The grouped recipe centres each regret in the group (mean 0.25): one step moved.
            assert job["reward_mean"] == 0.25
            assert job["metrics"]["optimizer_steps"] == 1
        finally:
            serve.stop()
