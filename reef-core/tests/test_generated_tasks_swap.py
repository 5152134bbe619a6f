"""Swapping task generators by configuration alone (P-TASK-1, P-TASK-2).

One deployment file, the generated-task recipe, and two generators registered by a plugin (as
an installed distribution would register them): changing ``generator`` in the YAML is the only
difference between the two runs. Each run builds the scenario's pipeline as the runtime does
(``build_pipeline``), runs a round and a task job, and hands the generator its results.
"""

from __future__ import annotations

from typing import Any

import pytest
from doubles.generators import (
    ArithmeticTasks,
    ScriptedTasks,
    WordTasks,
    swap_deployment,
    train_deployed_generation,
)

from reef.core.deployment import DeploymentError
from reef.plugins import Plugins
from reef.plugins.scenarios import load_deployment
from reef.recipe.generated_tasks import RolledOutTask
from reef.storage import Database, open_database
from reef.testing import inline_plugin
from reef.train.stages import build_pipeline, check_stages


class _Component:
    """Stands in for a training component: only its name is read here."""


@pytest.fixture
def plugins() -> Plugins:
    loaded = Plugins(blocked=())
    loaded.load()
    loaded.register(
        inline_plugin(
            task_generators={"arithmetic": ArithmeticTasks, "words": WordTasks},
            components={"recording": _Component},
        ),
        "scripted",
    )
    return loaded


def _deployment(generator: str) -> str:
    return swap_deployment(generator, component="recording")


def _run(generator: str, plugins: Plugins, database: Database) -> list[str]:
    names, generator_object = train_deployed_generation(
        _deployment(generator), plugins=plugins, database=database
    )
    assert isinstance(generator_object, ScriptedTasks)
    ((generation, results),) = generator_object.recorded
    assert generation == 1
    assert all(isinstance(r, RolledOutTask) for r in results)
    return names


# rule: P-TASK-1 P-TASK-2
def test_two_generators_swap_by_the_yaml_alone(
    plugins: Plugins, storage_database: Database, tmp_path: Any
) -> None:
    assert _run("arithmetic", plugins, storage_database) == ["add-g1-0", "add-g1-1"]
    other = open_database(f"sqlite:///{tmp_path}/other.db")
    try:
        assert _run("words", plugins, other) == ["reverse-g1-0", "reverse-g1-1"]
    finally:
        other.dispose()
    # And by module:Class, as a deployment names a class no plugin registered.
    third = open_database(f"sqlite:///{tmp_path}/third.db")
    try:
        names = _run("doubles.generators:WordTasks", plugins, third)
        assert names == ["reverse-g1-0", "reverse-g1-1"]
    finally:
        third.dispose()


# rule: P-TASK-1
def test_a_generator_that_is_no_task_generator_is_refused_at_its_key(
    plugins: Plugins, storage_database: Database
) -> None:
    for name, reason in (
        ("nothing", "unknown task_generator 'nothing'"),
        ("doubles.generators:ScriptedTasksSettings", "is not a TaskGenerator"),
    ):
        deployment = load_deployment(_deployment(name), plugins=plugins)
        with pytest.raises(DeploymentError) as caught:
            build_pipeline(
                "tasks", deployment.scenarios["tasks"], plugins=plugins, database=storage_database
            )
        (problem,) = caught.value.problems
        assert reason in problem
        assert problem.endswith("@ $.scenarios.tasks.pipeline.record2sample.config.generator")


# rule: P-TASK-2
def test_reef_check_builds_the_generator_and_names_its_bad_key_at_its_path(
    plugins: Plugins,
) -> None:
    good = _deployment("arithmetic")
    check_stages(load_deployment(good, plugins=plugins), plugins=plugins)
    bad = good.replace("tasks_per_generation", "tasks_per_round")
    with pytest.raises(DeploymentError) as caught:
        check_stages(load_deployment(bad, plugins=plugins), plugins=plugins)
    (problem,) = caught.value.problems
    assert problem.endswith(
        "@ $.scenarios.tasks.pipeline.record2sample.config.generator_config.tasks_per_round"
    )
