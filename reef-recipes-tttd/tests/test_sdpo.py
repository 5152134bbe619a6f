"""SDPO's teacher requests: composed for each sample of a step from its prompt and its
feedback, or a successful sibling's reply, written where distillation writes them
(``extra.reef.teacher``); the recipe's job parameters are the self-teacher and the mix."""

from __future__ import annotations

from typing import Any

import pytest

from reef import InferenceRecord, PluginConfigError, Report, TrajectorySample
from reef.testing import Database, TrainingPipeline, pipeline_context, training_pipeline
from reef_tttd.processor import SDPOJobData, SDPOSamples
from reef_tttd.recipe import SDPORecipe, SDPORecipeSettings

CONTEXT = pipeline_context("s", "c")
GRID = {"steps": 2, "groups_per_step": 1, "rollouts_per_group": 3}


def pipeline(database: Database) -> TrainingPipeline:
    r2s = SDPOSamples.from_config(GRID, context=CONTEXT, environ={})
    s2j = SDPOJobData.from_config(
        {"success_threshold": 1.0, "teacher_max_tokens": 512},
        context=CONTEXT,
        record2sample=r2s,
        environ={},
    )
    return training_pipeline(r2s, s2j, database)


def attempt(sdpo: TrainingPipeline, rollout: int, reply: str, score: float, **report: Any) -> None:
    request = {"messages": [{"role": "user", "content": "Solve it."}], "temperature": 1.0}
    response = {"choices": [{"message": {"role": "assistant", "content": reply}}]}
    sdpo.push(InferenceRecord(f"c{rollout}", "s", request, response, artifact_id="a1"))
    cell = {"step": 0, "group": 0, "rollout": rollout}
    sdpo.push(
        Report(f"r{rollout}", "s", (f"c{rollout}",), score=score, metadata={"sdpo": cell}, **report)
    )


def teacher_of(sample: Any) -> Any:
    assert isinstance(sample, TrajectorySample)
    return sample.trajectory.get("extra", {}).get("reef", {}).get("teacher")


def test_each_sample_gets_the_teacher_its_feedback_or_a_successful_sibling_gives(
    storage_database: Database,
) -> None:
    sdpo = pipeline(storage_database)
    attempt(sdpo, 0, "41", 0.0, feedback="off by one")
    attempt(sdpo, 1, "42", 1.0)
    attempt(sdpo, 2, "40", 0.0)
    data = sdpo.build_job_data(3)
    assert data is not None
    by_id = {s.sample_id: s for s in data.samples}
    failed_with_feedback = teacher_of(by_id["r0:0"])
    (message,) = failed_with_feedback["messages"]
    assert message["content"].startswith("Solve it.")  # the rollout's own prompt...
    assert "off by one" in message["content"]  # ...with its feedback...
    assert "42" in message["content"]  # ...and the successful sibling's reply
    assert failed_with_feedback["max_tokens"] == 512
    assert "temperature" not in failed_with_feedback  # sampling does not change a prompt
    assert "42" in teacher_of(by_id["r2:0"])["messages"][0]["content"]
    # The successful rollout has no other success and no feedback: no teacher, so it trains
    # the policy-gradient term alone (its teacher sequence is its own).
    assert teacher_of(by_id["r1:0"]) is None
    assert data.metadata["teachers"] == 2


def test_the_recipe_teaches_with_the_policy_itself_mixed_by_the_weight() -> None:
    parameters = SDPORecipe.job_parameters_of(SDPORecipeSettings(distillation_weight=0.25))
    assert parameters["objective"] == "importance_sampling"
    distillation = parameters["distillation"]
    assert (distillation["kl_coef"], distillation["reward_coef"]) == (0.25, 0.75)
    teacher = distillation["teacher"]
    assert teacher["model_path"] is None  # neither a model folder...
    assert teacher["base_url"] is None  # ...nor an engine: the student itself
    assert teacher["update_rate"] is None  # the student at each job's start weights
    with pytest.raises(PluginConfigError, match="must be in"):
        SDPORecipeSettings.parse({"distillation_weight": 1.5}, plugin_class=SDPORecipe)


def test_the_recipe_passes_the_moving_average_teachers_rate_and_the_ratio_clip() -> None:
    settings = SDPORecipeSettings.parse({"teacher_update_rate": 0.05}, plugin_class=SDPORecipe)
    parameters = SDPORecipe.job_parameters_of(settings)
    assert parameters["distillation"]["teacher"]["update_rate"] == 0.05
    assert "is_clip" not in parameters  # the ratio as it is, unless asked
    clipped = SDPORecipeSettings.parse({"is_clip": 2.0}, plugin_class=SDPORecipe)
    assert SDPORecipe.job_parameters_of(clipped)["is_clip"] == 2.0
    with pytest.raises(PluginConfigError, match="must be in"):
        SDPORecipeSettings.parse({"teacher_update_rate": 2.0}, plugin_class=SDPORecipe)


def test_the_recipe_passes_the_authors_full_logit_form() -> None:
    assert SDPORecipe.job_parameters_of(SDPORecipeSettings())["distillation"]["full_logit"] is None
    settings = SDPORecipeSettings.parse({"full_logit": {}}, plugin_class=SDPORecipe)
    full = SDPORecipe.job_parameters_of(settings)["distillation"]["full_logit"]
    assert full == {"topk": 100, "add_tail": True, "alpha": 0.5}  # lasgroup/SDPO's actor.yaml
    with pytest.raises(PluginConfigError, match="alpha"):
        SDPORecipeSettings.parse({"full_logit": {"alpha": 2}}, plugin_class=SDPORecipe)
