"""The task generator contract's values, the generated-task recipe, and its job data stage."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import hypothesis.strategies as st
import pytest
from doubles.generators import ArithmeticTasks
from hypothesis import given

import reef
from reef.components.job_parameters import JobParameters
from reef.components.task_rollouts import RolloutParameters
from reef.core.harbor import HarborTask
from reef.core.job_data import TaskSample, TrajectorySample
from reef.core.plugins import PluginConfigError, PluginSettings
from reef.recipe.generated_tasks import (
    FailedTask,
    GeneratedTaskRecipe,
    GeneratedTaskResult,
    GeneratedTaskResultError,
    HeldOutTask,
    RejectedTask,
    RolledOutTask,
    TaskGenerator,
    TaskValidationResult,
    result_from_json,
    result_to_json,
)
from reef.recipe.generated_tasks.processor import GeneratedTaskJobData
from reef.record2sample.generator import TaskGenerationRequest
from reef.testing import pipeline_context
from reef.testing.records import call, report


def _task(name: str = "t1", answer: str = "3") -> HarborTask:
    return HarborTask(
        name,
        {
            "task.toml": 'version = "1.0"\n',
            "instruction.md": "What is 1 + 2?\n",
            "tests/test.sh": f"test $(cat /app/answer.txt) = {answer}\n",
        },
        ("c1", "r1"),
    )


_rewards = st.lists(st.floats(-10, 10, allow_nan=False), min_size=1, max_size=5)
_results = st.one_of(
    st.builds(RejectedTask, st.just(_task()), st.text(max_size=20)),
    st.builds(HeldOutTask, st.just(_task())),
    st.builds(RolledOutTask, st.just(_task()), _rewards),
    st.builds(FailedTask, st.just(_task()), st.text(max_size=20), st.booleans()),
)


# rule: P-TASK-6
@given(_results)
def test_each_result_case_survives_the_task_store_json(result: GeneratedTaskResult) -> None:
    assert result_from_json(result_to_json(result)) == result


# rule: P-TASK-6
def test_a_rolled_out_task_has_one_finite_reward_per_rollout_that_ran() -> None:
    assert RolledOutTask(_task(), [0, 1]).rollout_rewards == (0.0, 1.0)
    with pytest.raises(ValueError, match="at least one"):
        RolledOutTask(_task(), [])
    with pytest.raises(ValueError, match="finite"):
        RolledOutTask(_task(), [float("nan")])


def test_a_stored_result_of_no_known_case_is_refused_by_name() -> None:
    with pytest.raises(GeneratedTaskResultError, match="unknown result case 'lost'"):
        result_from_json({"case": "lost", "task": _task().to_json()})
    with pytest.raises(GeneratedTaskResultError, match="rolled_out"):
        result_from_json({"case": "rolled_out", "task": _task().to_json()})


# rule: P-TASK-4
def test_validation_passes_exactly_when_it_found_no_error() -> None:
    assert TaskValidationResult().passed
    assert not TaskValidationResult(["the oracle fails its verifier"]).passed


# rule: P-TASK-3
def test_a_request_numbers_its_generation_and_names_its_sources_in_order() -> None:
    records = (call("c1"), report("r1", "c1"))
    request = TaskGenerationRequest(3, "sums", records)
    assert request.source_record_ids == ("c1", "r1")
    with pytest.raises(ValueError, match="generation"):
        TaskGenerationRequest(0)


class _Configured(TaskGenerator):
    """Records what from_config gave it."""

    built: list[tuple[str, Mapping[str, str], Any]] = []

    @classmethod
    def from_settings(
        cls, settings: PluginSettings, *, scenario: str, environ: Mapping[str, str]
    ) -> _Configured:
        cls.built.append((scenario, environ, settings))
        return cls()

    async def generate(self, request: TaskGenerationRequest) -> tuple[HarborTask, ...]:
        return ()

    async def validate(self, task: HarborTask) -> TaskValidationResult:
        return TaskValidationResult()


# rule: P-TASK-2
def test_from_config_parses_the_generators_settings_and_hands_it_scenario_and_environ() -> None:
    _Configured.built.clear()
    _Configured.from_config(None, scenario="math", environ={"KEY": "v"})
    assert _Configured.built == [("math", {"KEY": "v"}, reef.NoSettings())]
    with pytest.raises(PluginConfigError, match="unknown key 'model'"):
        _Configured.from_config({"model": "x"}, scenario="math", environ={})
    generator = ArithmeticTasks.from_config(
        {"tasks_per_generation": 3}, scenario="math", environ={}
    )
    assert generator.tasks_per_generation == 3


# rule: P-TASK-5
def test_record_results_keeps_nothing_by_default() -> None:
    generator = _Configured()
    assert asyncio.run(generator.record_results((HeldOutTask(_task()),), generation=1)) is None


# rule: P-TASK-3
def test_the_scripted_generator_keeps_the_requests_sources_in_each_task() -> None:
    request = TaskGenerationRequest(2, "", (call("c1"), report("r1", "c1")))
    tasks = asyncio.run(ArithmeticTasks(tasks_per_generation=2).generate(request))
    assert [t.source_agent_record_ids for t in tasks] == [("c1", "r1")] * 2
    verdicts = [asyncio.run(ArithmeticTasks().validate(t)) for t in tasks]
    assert all(v.passed for v in verdicts)


# rule: P-TASK-13 P-TASK-1
def test_the_recipe_trains_task_groups_with_the_deployments_rollout() -> None:
    assert GeneratedTaskRecipe.pipeline_spec() == reef.PipelineSpec(
        "GeneratedTaskSamples", "GeneratedTaskJobData"
    )

    def parameters(config: dict[str, Any] | None) -> Mapping[str, Any]:
        settings = GeneratedTaskRecipe.Settings.parse(config, plugin_class=GeneratedTaskRecipe)
        return GeneratedTaskRecipe.job_parameters_of(settings)

    rollout = {"rollouts_per_task": 8, "verifier_timeout_reward": 0.5}
    given = parameters({"job_parameters": {"rollout": rollout}})
    assert given["objective"] == "task_group"
    # The component reads back exactly what the deployment set.
    read = RolloutParameters.parse(given["rollout"], plugin_class=GeneratedTaskRecipe)
    assert read == RolloutParameters.parse(rollout, plugin_class=GeneratedTaskRecipe)
    assert (read.rollouts_per_task, read.verifier_timeout_reward) == (8, 0.5)
    assert parameters(None)["rollout"]["rollouts_per_task"] == 4
    with pytest.raises(PluginConfigError, match="rollouts_per_task"):
        parameters({"job_parameters": {"rollout": {"rollouts": 2}}})


# rule: P-TASK-7 P-TASK-13
def test_rollout_parameters_default_a_verifier_timeout_to_reward_zero() -> None:
    rollout = RolloutParameters.parse({}, plugin_class=GeneratedTaskRecipe)
    assert rollout.verifier_timeout_reward == 0.0
    job = JobParameters.parse(
        {"objective": "task_group", "rollout": {"rollouts_per_task": 2}},
        plugin_class=GeneratedTaskRecipe,
    )
    assert job.rollout == RolloutParameters(rollouts_per_task=2)


# rule: P-TASK-13 P-SIZE-1
def test_task_jobs_take_one_to_four_tasks_by_default_and_train_tasks_in_auto() -> None:
    context = pipeline_context()
    stage = GeneratedTaskJobData.from_config(
        None, context=context, record2sample=reef.NoSamples(context), environ={}
    )
    assert (stage.job_samples, stage.buffer_size) == (1, 4)
    assert stage.job_parameter_kinds == frozenset({"task"})
    larger = GeneratedTaskJobData.from_config(
        {"job_samples": 6}, context=context, record2sample=reef.NoSamples(context), environ={}
    )
    assert (larger.job_samples, larger.buffer_size) == (6, 6)
    tasks = (TaskSample("t1", _task().to_json(), sample_id="generated-tasks/t1"),)
    assert stage.make_job_data(tasks, "s:data:1").samples == tasks
    with pytest.raises(ValueError, match="not tasks"):
        stage.make_job_data((TrajectorySample({"steps": []}, sample_id="x"),), "s:data:2")
