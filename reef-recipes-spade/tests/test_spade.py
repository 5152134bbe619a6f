"""SPADE as a task generator: registered through ``reef_register_task_generators`` (not as a
recipe), its designer asked through an OpenAI-compatible engine, its validation run for real
through the generator service (the oracle in the sandbox, hint plays on the policy's engine).

The designer and the policy are stand-ins of OpenAI-compatible engines
(:mod:`reef.testing.task_engines`): the policy cannot add, and answers with the number a hint
gives, so a task sits at its frontier when its hint carries the answer.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reef import (
    GeneratorServiceError,
    HarborTask,
    HeldOutTask,
    PluginKind,
    RolledOutTask,
    TaskGenerationRequest,
)
from reef.embed import Plugins
from reef.testing.service import serve_on_loopback
from reef.testing.task_engines import (
    designed_sum_task,
    generator_service,
    hint_policy,
    scripted_designer,
)
from reef_spade.designer import DesignerError, hint_of
from reef_spade.generator import SpadeGenerator

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (reef's scripts/setup does)"
)


DESIGN = {
    "tasks": [
        designed_sum_task("frontier", 17, 25),
        designed_sum_task("broken-oracle", 17, 26, oracle=42),
        designed_sum_task("too-easy", 0, 0),
        designed_sum_task("beyond", 3, 4, hint="think about it"),
    ]
}


@pytest.fixture(scope="module")
def policy_url() -> Iterator[str]:
    with serve_on_loopback(hint_policy()) as url:
        yield url


@pytest.fixture
def designer_requests() -> list[Any]:
    return []


@pytest.fixture
def spade(
    tmp_path: Path, policy_url: str, designer_requests: list[Any]
) -> Iterator[SpadeGenerator]:
    reply = "Here are the tasks:\n" + json.dumps(DESIGN)
    with (
        serve_on_loopback(scripted_designer([reply], designer_requests)) as designer_url,
        generator_service(tmp_path, policy_url) as service_url,
    ):
        yield SpadeGenerator.from_config(
            {"designer": {"url": f"{designer_url}/v1", "model": "designer"}, "plays": 2},
            scenario="tasks",
            environ={"REEF_GENERATOR_URL": service_url},
        )


def test_spade_is_a_task_generator_not_a_recipe() -> None:
    # rule: P-TASK-1 — SPADE is a generator a deployment names, with the one generated-task
    # recipe.
    plugins = Plugins(blocked=())
    plugins.load()
    registration = plugins.registration(PluginKind.TASK_GENERATOR, "spade")
    assert registration is not None
    assert (registration.cls, registration.distribution) == (SpadeGenerator, "reef-recipes-spade")
    assert "spade" not in plugins.names(PluginKind.RECIPE)


def test_spade_designs_tasks_and_keeps_the_frontier(
    spade: SpadeGenerator, designer_requests: list[Any]
) -> None:
    # rule: P-TASK-3 — the request's source record ids travel in each task.
    request = TaskGenerationRequest(generation=3, description="sums of two numbers")
    tasks = asyncio.run(spade.generate(request))
    assert [t.name.split("-")[:3] for t in tasks] == [["spade", "3", str(i)] for i in range(4)]
    assert all(t.source_agent_record_ids == () for t in tasks)
    prompt = designer_requests[0]["messages"][0]["content"]
    assert "sums of two numbers" in prompt
    assert designer_requests[0]["model"] == "designer"
    # rule: P-TASK-4 — defects come back as errors; a task without any passed.
    results = [asyncio.run(spade.validate(task)) for task in tasks]
    assert results[0].errors == ()
    assert "oracle solution does not pass" in results[1].errors[0]
    assert "too easy" in results[2].errors[0]
    assert "beyond the policy's frontier" in results[3].errors[0]


def test_the_hint_stays_out_of_the_instruction(spade: SpadeGenerator) -> None:
    tasks = asyncio.run(spade.generate(TaskGenerationRequest(generation=1)))
    assert "carry the digits" not in tasks[0].instruction
    assert "carry the digits: 42" in tasks[0].files["task.toml"]


def test_results_feed_the_designer_once_per_generation(
    spade: SpadeGenerator, designer_requests: list[Any]
) -> None:
    # rule: P-TASK-5 — a second call for a closed generation is ignored; rule: P-TASK-6 — a
    # held-out task is never feedback.
    tasks = asyncio.run(spade.generate(TaskGenerationRequest(generation=1)))
    results = (RolledOutTask(tasks[0], (1.0, 0.0)), HeldOutTask(tasks[2]))
    asyncio.run(spade.record_results(results, generation=1))
    asyncio.run(spade.record_results(results, generation=1))
    assert len(spade.feedback) == 1
    assert spade.feedback[0].endswith(": 0.50")
    asyncio.run(spade.generate(TaskGenerationRequest(generation=2)))
    prompt = designer_requests[-1]["messages"][0]["content"]
    assert "What is 17 + 25?" in prompt
    assert "What is 0 + 0?" not in prompt


def test_a_designer_reply_without_tasks_fails_the_generation(
    tmp_path: Path, policy_url: str
) -> None:
    # rule: P-TASK-3 — an exception is a failure to run; the recipe retries the generation.
    with (
        serve_on_loopback(scripted_designer(["I cannot help with that."])) as designer_url,
        generator_service(tmp_path, policy_url) as service_url,
    ):
        spade = SpadeGenerator.from_config(
            {"designer": {"url": f"{designer_url}/v1"}},
            scenario="tasks",
            environ={"REEF_GENERATOR_URL": service_url},
        )
        with pytest.raises(DesignerError, match="holds no JSON object"):
            asyncio.run(spade.generate(TaskGenerationRequest(generation=1)))


def test_spade_without_the_generator_service_builds_and_fails_to_validate() -> None:
    # A deployment checks without the service running; validating needs it: the recipe retries.
    spade = SpadeGenerator.from_config(
        {"designer": {"url": "http://127.0.0.1:9/v1"}}, scenario="tasks", environ={}
    )
    task = HarborTask(name="t", files={"task.toml": "", "instruction.md": "", "tests/test.sh": ""})
    with pytest.raises(GeneratorServiceError, match="REEF_GENERATOR_URL is not set"):
        asyncio.run(spade.validate(task))


def test_the_designer_is_told_of_the_last_feedback_tasks_and_no_more_are_kept(
    spade: SpadeGenerator,
) -> None:
    """A long run keeps only what the next prompt can show: the newest feedback_tasks."""
    tasks = asyncio.run(spade.generate(TaskGenerationRequest(generation=1)))
    keep = spade.settings.feedback_tasks
    for generation in range(1, keep + 6):
        result = RolledOutTask(tasks[0], (float(generation % 2),))
        asyncio.run(spade.record_results((result,), generation=generation))
    assert len(spade.feedback) == keep
    assert spade.feedback[-1].endswith(f": {float((keep + 5) % 2):.2f}")


@pytest.mark.parametrize(
    "toml", ["a = " + "[" * 50_000, "metadata = 1\n", "[metadata\n", "[metadata.spade]\nhint = 3\n"]
)
def test_a_task_toml_without_a_readable_hint_has_none(toml: str) -> None:
    files = {"task.toml": toml, "instruction.md": "?", "tests/test.sh": "exit 0\n"}
    assert hint_of(HarborTask("t", files)) is None
