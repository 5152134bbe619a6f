"""The ``slime`` component and Reef as slime's data source, driven exactly as slime drives them
(:mod:`doubles.slime_run` cites the slime code each call and its order come from): a
restart of both sides loses no sample and trains none twice. The component's share of the
trainer's contract runs in ``test_components_contract.py``.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("jinja2")

from doubles.slime_run import Crash, Sample, SlimeRun

from reef.components.interface import JobHandle
from reef.components.slime.component import SlimeComponent, folder_digest
from reef.components.slime.data_source import (
    ReefDataSource,
    ReefDataSourceError,
    generate_rollout,
)
from reef.core.job_data import JobData, TrajectorySample
from reef.core.plugins import PluginConfigError
from reef.testing.samples import exchange


def job(number: int, size: int = 4, *, group: int = 2) -> JobData:
    return JobData(
        f"s:data:{number}",
        tuple(
            TrajectorySample(
                exchange(f"q{number}.{i}", f"answer {i}"),
                reward=float(i % 2),
                sample_id=f"{number}.{i}",
                group_id=f"g{number}.{i // group}",
            )
            for i in range(size)
        ),
    )


def component(root: Path) -> SlimeComponent:
    (root / "base").mkdir(parents=True, exist_ok=True)
    (root / "base" / "model.json").write_text("[]")
    return SlimeComponent.from_config(
        {"exchange_dir": str(root / "exchange"), "base_weights": str(root / "base"),
         "tokenizer": "byte"}
    )  # fmt: skip


def submit_all(reef: SlimeComponent, jobs: list[JobData], **parameters: Any) -> None:
    for data in jobs:
        reef.submit(data, parameters or None)
    reef.close()  # every job is in the exchange


def loaded_source(args: Any, **settings: Any) -> ReefDataSource:
    """The data source slime builds with ``args`` and ``settings`` over them, loaded fresh."""
    source = ReefDataSource(SimpleNamespace(**{**vars(args), **settings}), sample_class=Sample)
    source.load(-1)
    return source


def every_sample(jobs: list[JobData]) -> list[str]:
    return [str(s.sample_id) for data in jobs for s in data.samples]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["train.py", "train_async.py"])
@pytest.mark.parametrize(
    "crash", [(1, "generated"), (2, "trained"), (1, "model_saved"), (3, "model_saved")]
)
def test_a_restart_of_both_sides_loses_no_sample_and_trains_none_twice(
    tmp_path: Path, asynchronous: bool, crash: tuple[int, str]
) -> None:
    """Slime dies at a rollout (before or after saving the model); Reef's process restarts too.
    Slime resumes from its last checkpoint: every sample ends up in the weights exactly once,
    every job finishes, and Reef's restarted component writes no job twice."""
    jobs = [job(n) for n in range(5)]  # 20 samples in 10 groups: 5 rollouts of 2 groups
    reef = component(tmp_path)
    submit_all(reef, jobs[:4], objective="importance_sampling")
    slime = SlimeRun(tmp_path, save_interval=2, asynchronous=asynchronous)
    with pytest.raises(Crash):
        slime.run(num_rollout=4, crash=crash)

    # Reef's process restarted: it resubmits what it had running, and a new job arrives.
    restarted = component(tmp_path)
    submit_all(restarted, jobs, objective="importance_sampling")
    assert len(list((tmp_path / "exchange" / "jobs").glob("*.json"))) == 5
    weights = slime.run(num_rollout=5)
    assert sorted(weights) == sorted(every_sample(jobs))
    assert len(weights) == len(set(weights))
    for data in jobs:
        outcome = restarted.poll(JobHandle(data.id, "slime"))
        assert outcome is not None, data.id
        assert outcome.event == "finished", data.id
        assert {line["sample_id"] for line in outcome.metrics["consumed"]} == {
            s.sample_id for s in data.samples
        }


def test_a_job_finishes_when_slime_saved_the_weights_that_trained_all_of_it(
    tmp_path: Path,
) -> None:
    """Job 1's four groups train across two slime rollouts of three groups: it is running
    until the second is saved, then finished, saying in which rollout each sample trained;
    publishing names the weights of the last save by their content."""
    reef = component(tmp_path)
    assert reef.publish().path == tmp_path / "base"  # before any save: slime's start weights
    submit_all(reef, [job(0), job(1, size=8)])
    first, second = JobHandle("s:data:0", "slime"), JobHandle("s:data:1", "slime")
    assert reef.poll(first) is None
    slime = SlimeRun(tmp_path, rollout_batch_size=3)
    slime.run(num_rollout=1)
    done = reef.poll(first)
    assert done is not None
    assert done.event == "finished"
    assert reef.poll(second) is None  # three of its groups wait for rollout 1
    slime.run(num_rollout=2)
    outcome = reef.poll(second)
    assert outcome is not None
    assert outcome.event == "finished"
    assert outcome.metrics["slime_rollouts"] == [0, 1]
    assert outcome.metrics["steps"] == 2
    assert [line["step"] for line in outcome.metrics["consumed"]] == [0, 0] + [1] * 6
    artifact = reef.publish()
    assert artifact.path == tmp_path / "hf" / "rollout-1"
    assert artifact.artifact_id == folder_digest(artifact.path)
    assert component(tmp_path).publish() == artifact  # the same id after a restart


def test_samples_reach_slime_as_groups_with_tokens_masks_and_rewards(tmp_path: Path) -> None:
    """Reef's groups become slime's groups; each sample's response is its trained reply, its
    reward the centred advantage under importance_sampling (slime must not normalise again)."""
    reef = component(tmp_path)
    submit_all(reef, [job(0)], objective="importance_sampling")
    args = SlimeRun(tmp_path).args
    source = ReefDataSource(args, sample_class=Sample)
    source.load(-1)
    groups = generate_rollout(args, 0, source)
    assert [[s.metadata["reef"]["sample_id"] for s in g] for g in groups] == [
        ["0.0", "0.1"],
        ["0.2", "0.3"],
    ]
    first = groups[0][0]
    (sequence,) = reef.renderer.render_sample(exchange("q0.0", "answer 0")).sequences
    assert first.tokens == list(sequence.token_ids)
    assert first.response_length == len(first.loss_mask or [])
    assert first.loss_mask == list(
        sequence.loss_mask[len(sequence.token_ids) - first.response_length :]
    )
    assert first.loss_mask[0] == 1
    assert [s.reward for s in groups[0]] == [-0.5, 0.5]
    assert first.metadata["reef"]["reward"] == 0.0


def test_misconfigured_slime_gets_an_error_that_names_the_fix(tmp_path: Path) -> None:
    args = SlimeRun(tmp_path).args
    with pytest.raises(ReefDataSourceError, match="reef_exchange_dir"):
        ReefDataSource(SimpleNamespace(rollout_global_dataset=True), sample_class=Sample)
    with pytest.raises(ReefDataSourceError, match="disable-rollout-global-dataset"):
        ReefDataSource(SimpleNamespace(**{**vars(args), "rollout_global_dataset": False}))
    submit_all(component(tmp_path), [job(0)])
    SlimeRun(tmp_path).run(num_rollout=1)
    fresh = ReefDataSource(args, sample_class=Sample)
    with pytest.raises(ReefDataSourceError, match="--load"):
        fresh.load(-1)  # slime started from fresh weights on an exchange that trained before


def test_a_job_that_cannot_render_fails_with_the_reason(tmp_path: Path) -> None:
    from reef.core.job_data import TaskSample

    reef = component(tmp_path)
    handle = reef.submit(JobData("s:data:9", (TaskSample("t", {"instruction": "x"}),)))
    outcome = reef.wait(handle, timeout=30)
    assert outcome.event == "failed"
    assert "does not roll out tasks" in (outcome.error or "")


def test_ppo_reaches_slime_only_with_slimes_clip_range_set_to_the_jobs(tmp_path: Path) -> None:
    """Slime's PPO loss (``--loss-type policy_loss``) is the ppo objective; its clip range is
    slime's ``--eps-clip`` and ``--eps-clip-high``, which the data source checks against the
    job's ``clip_low`` and ``clip_high`` before slime trains a group of it."""
    reef = component(tmp_path)
    submit_all(reef, [job(0)], objective="ppo", reward_baseline="none")
    args = SlimeRun(tmp_path).args
    wrong = loaded_source(args, eps_clip=0.2, eps_clip_high=None)
    with pytest.raises(
        ReefDataSourceError,
        match=r"clip_low 0.2 and clip_high 0.28, but slime clips the ratio with --eps-clip 0.2"
        r" --eps-clip-high 0.2: start slime with --eps-clip 0.2 --eps-clip-high 0.28",
    ):
        generate_rollout(wrong.args, 0, wrong)
    right = loaded_source(args, eps_clip=0.2, eps_clip_high=0.28)
    groups = generate_rollout(right.args, 0, right)
    # reward_baseline none: the reward as it is, not centred in its group.
    assert [s.reward for s in groups[0]] == [0.0, 1.0]


def test_distillation_is_refused_with_the_reason_and_what_to_use(tmp_path: Path) -> None:
    reef = component(tmp_path)
    parameters = {"objective": "importance_sampling", "distillation": {"teacher": {}}}
    with pytest.raises(PluginConfigError, match="local or the tinker component") as refused:
        reef.submit(job(0), parameters)
    assert refused.value.errors[0].key == "$.parameters.distillation"
    reef.close()


def test_slime_trains_samples_only_at_the_temperature_they_were_sampled_at(
    tmp_path: Path,
) -> None:
    """Slime divides every rollout's logits by its ``--rollout-temperature``
    (``slime/backends/megatron_utils/loss.py``): a job of samples sampled at another is refused
    before slime trains a group of it, naming the flag; a job of two temperatures, which slime
    cannot score, names the components that can."""

    def sampled(number: int, temperatures: list[float]) -> JobData:
        return JobData(
            f"s:data:{number}",
            tuple(
                TrajectorySample(
                    exchange(f"q{number}.{i}", f"answer {i}", temperature=t),
                    reward=float(i % 2),
                    sample_id=f"{number}.{i}",
                    group_id=f"g{number}",
                )
                for i, t in enumerate(temperatures)
            ),
        )

    reef = component(tmp_path)
    submit_all(reef, [sampled(0, [0.6, 0.6])], objective="importance_sampling")
    args = SlimeRun(tmp_path).args
    assert not hasattr(args, "rollout_temperature")  # slime's default, 1.0
    for source in (loaded_source(args), loaded_source(args, rollout_temperature=1.0)):
        with pytest.raises(
            ReefDataSourceError,
            match=r"sampled at temperature 0.6, but slime scores them at --rollout-temperature"
            r" 1.0: start slime with --rollout-temperature 0.6",
        ):
            source.get_samples(1)
    assert len(loaded_source(args, rollout_temperature=0.6).get_samples(1)[0]) == 2

    mixed = tmp_path / "mixed"
    reef = component(mixed)
    submit_all(reef, [sampled(0, [0.6, 1.0])], objective="importance_sampling")
    with pytest.raises(ReefDataSourceError, match="at one temperature"):
        loaded_source(SlimeRun(mixed).args).get_samples(1)
    # Supervised samples have no sampling temperature to match.
    plain = tmp_path / "plain"
    reef = component(plain)
    submit_all(reef, [sampled(0, [0.6, 0.6])])
    assert len(loaded_source(SlimeRun(plain).args).get_samples(1)[0]) == 2
