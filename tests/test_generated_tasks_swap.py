"""Swapping SPADE for a scripted task generator by the deployment file alone (P-TASK-1,
P-TASK-2).

One deployment text, the generated-task recipe and the trainer's pipeline as the runtime builds
it (``build_pipeline``): the ``generator`` and ``generator_config`` keys are all that differs
between the run with SPADE (the installed ``reef-recipes-spade``, found through its entry point)
and the run with the scripted arithmetic generator of :mod:`doubles.generators`. Each run
makes a generation, trains it in one task job and hands the generator its results.

SPADE runs for real: its designer is a stand-in OpenAI-compatible engine that writes two sum
tasks, and its validation goes through a generator service on loopback (the oracle in the
sandbox, hint plays on a stand-in policy that answers only with a hint's number, so both tasks
sit at its frontier). Needs bubblewrap, as the sandbox does.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from doubles.generators import ArithmeticTasks, swap_deployment, train_deployed_generation

from reef import RolledOutTask
from reef.plugins import Plugins
from reef.storage import open_database
from reef.testing import inline_plugin
from reef.testing.service import NullComponent, serve_on_loopback
from reef.testing.task_engines import (
    designed_sum_task,
    generator_service,
    hint_policy,
    scripted_designer,
)
from reef_spade.generator import SpadeGenerator

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup does)"
)


DESIGN = {"tasks": [designed_sum_task("first", 17, 25), designed_sum_task("second", 38, 5)]}


@pytest.fixture
def plugins() -> Plugins:
    loaded = Plugins(blocked=())
    loaded.load()
    loaded.register(inline_plugin(components={"noop": NullComponent}), "swaptest")
    return loaded


@pytest.fixture
def spade_urls(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """The designer's base URL and the generator service's."""
    reply = "Two tasks:\n" + json.dumps(DESIGN)
    with (
        serve_on_loopback(hint_policy()) as policy_url,
        serve_on_loopback(scripted_designer([reply])) as designer_url,
        generator_service(tmp_path, policy_url) as service_url,
    ):
        yield f"{designer_url}/v1", service_url


def _run(
    generator: str, generator_config: str, plugins: Plugins, folder: Path, service_url: str
) -> tuple[list[str], object]:
    """One generation trained in one job: the job's task names and the generator object."""
    folder.mkdir()
    text = swap_deployment(generator, component="noop", generator_config=generator_config)
    database = open_database(f"sqlite:///{folder}/reef.db")
    try:
        return train_deployed_generation(
            text, plugins=plugins, database=database, environ={"REEF_GENERATOR_URL": service_url}
        )
    finally:
        database.dispose()


# rule: P-TASK-1 P-TASK-2
def test_spade_and_a_scripted_generator_swap_by_the_yaml_alone(
    plugins: Plugins, spade_urls: tuple[str, str], tmp_path: Path
) -> None:
    designer_url, service_url = spade_urls
    spade_config = f'{{designer: {{url: "{designer_url}", model: designer}}, plays: 2}}'
    names, spade = _run("spade", spade_config, plugins, tmp_path / "spade", service_url)
    assert isinstance(spade, SpadeGenerator)
    assert [name.split("-")[:3] for name in names] == [["spade", "1", "0"], ["spade", "1", "1"]]
    # The job's results reached SPADE: the designer is told how the policy did on each task.
    assert sorted(spade.feedback) == [
        "'What is 17 + 25? Answer with the number only.': 0.50",
        "'What is 38 + 5? Answer with the number only.': 0.50",
    ]

    scripted_config = "{tasks_per_generation: 2}"
    generator = "doubles.generators:ArithmeticTasks"
    names, scripted = _run(generator, scripted_config, plugins, tmp_path / "scripted", service_url)
    assert isinstance(scripted, ArithmeticTasks)
    assert names == ["add-g1-0", "add-g1-1"]
    ((generation, results),) = scripted.recorded
    assert generation == 1
    assert [r.rollout_rewards for r in results if isinstance(r, RolledOutTask)] == [(1.0, 0.0)] * 2
