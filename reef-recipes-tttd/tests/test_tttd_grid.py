"""The step grid of both recipes (TTTD and SDPO) through the TrainingPipeline, on the real sample
store.

The rules it touches: the grid is configured once on TTTDSamples and read by TTTDJobData
(P-STG-9); a job is one step, a fixed unit (P-SIZE-4); the collection group (the step) spans
several comparison groups (P-REP-10); a complete step of mixed artifacts is an invariant
failure in status (P-BUF-8).
"""

from __future__ import annotations

from typing import Any

import pytest

from reef import GroupedReportSamples, PluginConfigError, TrajectorySample
from reef.testing import Database, TrainingPipeline, pipeline_context, training_pipeline
from reef.testing.records import call, report
from reef_tttd.grid import StepGridJobData, StepGridSamples
from reef_tttd.processor import SDPOJobData, SDPOSamples, TTTDJobData, TTTDSamples

CONTEXT = pipeline_context("s", "c")
GRID = {"steps": 3, "groups_per_step": 2, "rollouts_per_group": 2}
RECIPES = {"tttd": (TTTDSamples, TTTDJobData), "sdpo": (SDPOSamples, SDPOJobData)}


@pytest.fixture(params=sorted(RECIPES))
def recipe(request: pytest.FixtureRequest) -> str:
    """The recipe under test, by its cell key: both share the grid."""
    return str(request.param)


def stages(recipe: str, **job: Any) -> tuple[StepGridSamples, StepGridJobData]:
    samples_class, job_class = RECIPES[recipe]
    r2s = samples_class.from_config(GRID, context=CONTEXT, environ={})
    s2j = job_class.from_config(job or None, context=CONTEXT, record2sample=r2s, environ={})
    return r2s, s2j


def pipeline(recipe: str, database: Database, **grid: Any) -> TrainingPipeline:
    samples_class, job_class = RECIPES[recipe]
    r2s = samples_class.from_config({**GRID, **grid}, context=CONTEXT, environ={})
    s2j = job_class.from_config(None, context=CONTEXT, record2sample=r2s, environ={})
    return training_pipeline(r2s, s2j, database)


def rollout(
    tttd: TrainingPipeline,
    step: int,
    group: int,
    rollout: int,
    score: float = 1.0,
    *,
    artifact: str = "art1",
) -> str:
    """One rollout of the runner: a call of its own conversation and the report of its cell."""
    key = key_of(tttd)
    name = f"s{step}g{group}r{rollout}"
    tttd.push(call(f"c-{name}", session=name, artifact=artifact))
    cell = {"step": step, "group": group, "rollout": rollout}
    tttd.push(report(f"r-{name}", f"c-{name}", score=score, **{key: cell}))
    return name


def fill_step(tttd: TrainingPipeline, step: int, *, skip: int = 0) -> None:
    cells = [(g, r) for g in range(2) for r in range(2)]
    for group, index in cells[: len(cells) - skip]:
        rollout(tttd, step, group, index, score=float(group + index))


def key_of(tttd: TrainingPipeline) -> str:
    stage = tttd.record2sample
    assert isinstance(stage, StepGridSamples)
    return stage.cell_key


def tttd_status(tttd: TrainingPipeline) -> dict[str, Any]:
    status: dict[str, Any] = tttd.status()[key_of(tttd)]
    return status


def test_the_grid_is_configured_once_on_the_samples_stage(recipe: str) -> None:
    # rule: P-STG-9 the sample-to-job stage reads the grid from the record-to-sample stage.
    r2s, s2j = stages(recipe)
    assert s2j.job_samples == s2j.max_job_samples == 4  # one step: 2 groups x 2 rollouts
    with pytest.raises(PluginConfigError) as info:
        type(s2j).from_config({"steps": 3}, context=CONTEXT, record2sample=r2s, environ={})
    assert info.value.key == "$.steps"  # the grid's keys are not the job stage's
    samples_class, job_class = RECIPES[recipe]
    for other in (
        GroupedReportSamples.from_config(None, context=CONTEXT, environ={}),
        next(c for c, _ in RECIPES.values() if c is not samples_class).from_config(
            GRID, context=CONTEXT, environ={}
        ),
    ):
        with pytest.raises(
            PluginConfigError, match=f"reads the step grid from {samples_class.__name__}"
        ):
            job_class.from_config(None, context=CONTEXT, record2sample=other, environ={})


def test_a_larger_job_samples_is_refused(recipe: str) -> None:
    # rule: P-SIZE-4 job data is one fixed unit: max_job_samples passed, a larger job refused.
    _, s2j = stages(recipe, job_samples=3)
    assert (s2j.job_samples, s2j.buffer_size) == (3, 3)
    with pytest.raises(PluginConfigError) as info:
        stages(recipe, job_samples=5)
    assert info.value.key == "$.job_samples"
    assert "more than this stage's job data holds (4)" in str(info.value)
    with pytest.raises(PluginConfigError) as info:
        stages(recipe, job_samples=4, buffer_size=8)
    assert info.value.key == "$.buffer_size"


def test_a_complete_step_is_one_unit_spanning_its_comparison_groups(
    recipe: str, storage_database: Database
) -> None:
    # rule: P-REP-10 the collection group (the step) spans several comparison groups.
    # rule: P-SIZE-4 one job is one step.
    tttd = pipeline(recipe, storage_database)
    fill_step(tttd, 0, skip=1)
    assert not tttd.ready(1)  # a step waits for every cell
    assert tttd_status(tttd)["open_steps"] == {"0": 3}
    rollout(tttd, 0, 1, 1, score=2.0)
    fill_step(tttd, 1)
    data = tttd.build_job_data(1)
    assert data is not None
    assert sorted(s.sample_id for s in data.samples) == sorted(
        f"r-s0g{g}r{r}:0" for g in range(2) for r in range(2)
    )  # one step only, though step 1 is in the buffer too
    groups = {s.group_id for s in data.samples}
    assert len(groups) == 2  # the step's two comparison groups
    for sample in data.samples:
        assert isinstance(sample, TrajectorySample)
        assert sample.group_id is not None
        assert sample.group_id.endswith(f"/{sample.metadata[recipe]['group']}")
    if recipe == "tttd":
        assert data.metadata["advantage"]["estimator"] == "entropic"
        assert data.metadata["advantage"]["beta"] is None  # chosen per group by kl_target
    assert tttd_status(tttd)["ready_steps"] == [0, 1]


def test_a_complete_step_of_mixed_artifacts_is_an_invariant_failure(
    recipe: str, storage_database: Database
) -> None:
    # rule: P-BUF-8 a terminal outcome that cannot become job data is reported in status.
    tttd = pipeline(recipe, storage_database)
    fill_step(tttd, 0, skip=1)
    rollout(tttd, 0, 1, 1, artifact="art2")
    assert not tttd.ready(1)
    (failure,) = tttd_status(tttd)["invariant_failures"]
    assert failure["step"] == 0
    assert failure["artifacts"] == ["art1", "art2"]
    assert tttd.status()["ended_records"]["group_discarded"] == 8  # 4 reports, 4 calls
    tttd.push(call("late", session="late"))  # a late report of the failed step trains nothing
    tttd.push(report("r-late", "late", **{recipe: {"step": 0, "group": 0, "rollout": 0}}))
    assert tttd_status(tttd)["refused_reports"] == {"step_decided": 1}


def test_a_step_the_runner_left_is_abandoned(recipe: str, storage_database: Database) -> None:
    tttd = pipeline(recipe, storage_database)
    fill_step(tttd, 0, skip=2)
    rollout(tttd, 1, 0, 0)
    status = tttd_status(tttd)
    assert status["abandoned_steps"] == [0]
    assert status["open_steps"] == {"1": 1}
    assert tttd.status()["ended_records"]["step_abandoned"] == 4
    rollout(tttd, 0, 1, 1)  # the abandoned step cannot complete later
    assert tttd_status(tttd)["refused_reports"] == {"step_decided": 1}


def test_two_open_steps_let_a_runner_collect_ahead(recipe: str, storage_database: Database) -> None:
    tttd = pipeline(recipe, storage_database, open_steps=2)
    fill_step(tttd, 0, skip=1)
    fill_step(tttd, 1)
    assert tttd_status(tttd)["abandoned_steps"] == []
    rollout(tttd, 0, 1, 1)
    assert tttd_status(tttd)["ready_steps"] == [1, 0]


def test_reports_that_cannot_train_are_refused_and_counted(
    recipe: str, storage_database: Database
) -> None:
    tttd = pipeline(recipe, storage_database)
    tttd.push(call("c1", session="x"))
    tttd.push(report("r1", "c1", **{recipe: {"step": 0, "group": 2, "rollout": 0}}))
    tttd.push(call("c2", session="y"))
    tttd.push(report("r2", "c2", **{recipe: {"step": 3, "group": 0, "rollout": 0}}))
    tttd.push(call("c3", session="z"))
    tttd.push(report("r3", "c3", **{recipe: {"step": 0, "group": True, "rollout": 0}}))
    tttd.push(call("c4", session="w"))
    tttd.push(report("r4", "c4"))
    tttd.push(call("c5", session="v"))
    tttd.push(report("r5", "c5", score=None, **{recipe: {"step": 0, "group": 0, "rollout": 0}}))
    assert tttd_status(tttd)["refused_reports"] == {
        "bad_cell": 1,
        "no_cell": 1,
        "no_score": 1,
        "outside_grid": 2,
    }
    assert tttd.status()["ended_records"]["not_training_report"] == 5


def test_a_taken_cell_keeps_its_first_report(recipe: str, storage_database: Database) -> None:
    tttd = pipeline(recipe, storage_database)
    rollout(tttd, 0, 0, 0, score=1.0)
    tttd.push(call("again", session="again"))
    tttd.push(report("r-again", "again", **{recipe: {"step": 0, "group": 0, "rollout": 0}}))
    assert tttd.status()["ended_records"]["slot_taken"] == 1
    assert tttd_status(tttd)["open_steps"] == {"0": 1}
