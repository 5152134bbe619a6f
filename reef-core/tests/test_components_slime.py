"""The ``slime`` component and Reef as slime's data source, driven exactly as slime drives them.

Slime itself (Megatron, Ray, GPUs) is not installed here. :class:`SlimeRun` is a stand-in of
slime's training loop that makes the data-source calls slime makes, in slime's order, taken from
slime's code (THUDM/slime):

- ``slime/ray/rollout.py``, ``RolloutManager.__init__``: ``data_source_cls(args)``;
- ``slime/ray/placement_group.py``, ``create_training_models``: with ``rollout_global_dataset``,
  ``rollout_manager.load(start_rollout_id - 1)``, where ``start_rollout_id`` is the actor
  checkpoint's rollout + 1 (``slime/backends/megatron_utils/actor.py``, ``create``), 0 on a
  fresh start;
- ``train.py``, ``train``: for each rollout, ``generate(rollout_id)``
  (``RolloutManager._get_rollout_data``: ``call_rollout_fn(generate_rollout, args, rollout_id,
  data_source)``), the actor trains, and when ``should_run_periodic_action(rollout_id,
  save_interval, ..., num_rollout)`` (``slime/utils/misc.py``: ``(rollout_id + 1) % interval ==
  0`` or the last rollout): ``actor_model.save_model(rollout_id)`` then
  ``rollout_manager.save(rollout_id)``, i.e. ``data_source.save(rollout_id)``;
- ``train_async.py``, ``train``: the same, but ``generate(rollout_id + 1)`` is called before
  rollout ``rollout_id`` trains and saves.

The stand-in's "weights" are the list of Reef sample ids trained into them, so a test sees
exactly what trained once, twice or never; ``--save-hf`` folders hold that list.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("jinja2")

from reef.components.interface import JobHandle  # noqa: E402
from reef.components.slime.component import SlimeComponent, folder_digest  # noqa: E402
from reef.components.slime.data_source import (  # noqa: E402
    ReefDataSource,
    ReefDataSourceError,
    generate_rollout,
)
from reef.core.job_data import JobData, TrajectorySample  # noqa: E402


@dataclass
class Sample:
    """The fields of ``slime.utils.types.Sample`` the data source fills."""

    class Status(enum.Enum):
        COMPLETED = "completed"

    group_index: int | None = None
    index: int | None = None
    rollout_id: int | None = None
    tokens: list[int] = field(default_factory=list)
    response_length: int = 0
    loss_mask: list[int] | None = None
    reward: float | None = None
    rollout_log_probs: list[float] | None = None
    status: Status = Status.COMPLETED
    metadata: dict[str, Any] = field(default_factory=dict)


class Crash(Exception):
    """Slime's job died here."""


class SlimeRun:
    """One run of slime's training loop (see the module's documentation).

    :param crash: ``(rollout_id, point)``: die at that rollout, at ``trained`` (after training,
        before saving), ``model_saved`` (after ``save_model``, before the data source's save),
        or ``generated`` (after the rollout's samples were handed out, before training).
    """

    def __init__(
        self,
        root: Path,
        *,
        rollout_batch_size: int = 2,
        save_interval: int = 1,
        asynchronous: bool = False,
    ) -> None:
        self.root = root
        self.args = SimpleNamespace(
            reef_exchange_dir=str(root / "exchange"),
            reef_wait_seconds=0.0,
            rollout_global_dataset=True,
            rollout_batch_size=rollout_batch_size,
            save_hf=str(root / "hf" / "rollout-{rollout_id}"),
            hf_checkpoint=str(root / "base"),
        )
        self.save_interval = save_interval
        self.asynchronous = asynchronous
        (root / "checkpoints").mkdir(parents=True, exist_ok=True)

    def _latest_checkpoint(self) -> tuple[int, list[str]]:
        saved = sorted(int(p.stem) for p in (self.root / "checkpoints").glob("*.json"))
        if not saved:
            return -1, []
        return saved[-1], json.loads((self.root / "checkpoints" / f"{saved[-1]}.json").read_text())

    def _save_model(self, rollout_id: int, weights: list[str]) -> None:
        body = json.dumps(weights)
        (self.root / "checkpoints" / f"{rollout_id}.json").write_text(body)
        hf = Path(self.args.save_hf.format(rollout_id=rollout_id))
        hf.mkdir(parents=True, exist_ok=True)
        (hf / "model.json").write_text(body)

    def run(self, num_rollout: int, crash: tuple[int, str] | None = None) -> list[str]:
        data_source = ReefDataSource(self.args, sample_class=Sample)
        loaded, weights = self._latest_checkpoint()
        data_source.load(loaded)  # create_training_models: load(start_rollout_id - 1)
        start = loaded + 1

        def generate(rollout_id: int) -> list[list[Sample]]:
            groups = generate_rollout(self.args, rollout_id, data_source)
            if crash == (rollout_id, "generated"):
                raise Crash(rollout_id)
            return groups

        pending = generate(start) if self.asynchronous and start < num_rollout else None
        for rollout_id in range(start, num_rollout):
            if self.asynchronous:
                groups, pending = pending, (
                    generate(rollout_id + 1) if rollout_id + 1 < num_rollout else None
                )
            else:
                groups = generate(rollout_id)
            assert groups is not None
            # The actor trains every sequence; a Reef sample's sequences share a rollout_id.
            trained = {}
            for group in groups:
                for sample in group:
                    trained[sample.rollout_id] = sample.metadata["reef"]["sample_id"]
            weights = weights + list(trained.values())
            if crash == (rollout_id, "trained"):
                raise Crash(rollout_id)
            last = rollout_id == num_rollout - 1
            if last or (rollout_id + 1) % self.save_interval == 0:
                self._save_model(rollout_id, weights)
                if crash == (rollout_id, "model_saved"):
                    raise Crash(rollout_id)
                data_source.save(rollout_id)
        return weights


def trajectory(prompt: str, reply: str) -> dict[str, Any]:
    return {
        "schema_version": "ATIF-v1.8",
        "agent": {"name": "toy", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": prompt},
            {"step_id": 2, "source": "agent", "message": reply},
        ],
    }


def job(number: int, size: int = 4, *, group: int = 2) -> JobData:
    return JobData(
        f"s:data:{number}",
        tuple(
            TrajectorySample(
                trajectory(f"q{number}.{i}", f"answer {i}"),
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
        assert outcome is not None and outcome.event == "finished", data.id
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
    assert done is not None and done.event == "finished"
    assert reef.poll(second) is None  # three of its groups wait for rollout 1
    slime.run(num_rollout=2)
    outcome = reef.poll(second)
    assert outcome is not None and outcome.event == "finished"
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
    (sequence,) = reef.renderer.render_sample(trajectory("q0.0", "answer 0")).sequences
    assert first.tokens == list(sequence.token_ids)
    assert first.response_length == len(first.loss_mask or [])
    assert first.loss_mask == list(sequence.loss_mask[len(sequence.token_ids) - first.response_length :])
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
