"""The local training component: it really trains, deterministically, and publishes artifacts
named by their content."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from reef.components.artifacts import load_model_folder, weights_digest  # noqa: E402
from reef.components.interface import JobHandle  # noqa: E402
from reef.components.local import LocalComponent  # noqa: E402
from reef.components.job_samples import group_advantages  # noqa: E402
from reef.components.objectives import token_logprobs  # noqa: E402
from reef.core.job_data import JobData, TaskSample, TrajectorySample  # noqa: E402
from reef.core.plugins import PluginConfigError  # noqa: E402


def trajectory(prompt: str, reply: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "schema_version": "ATIF-v1.8",
        "agent": {"name": "toy", "version": "1"},
        "steps": [
            {"step_id": 1, "source": "user", "message": prompt},
            {"step_id": 2, "source": "agent", "message": reply},
        ],
    }
    if extra:
        body["extra"] = {"reef": extra}
    return body


def component(state_dir: Path, **settings: Any) -> LocalComponent:
    config = {
        "state_dir": str(state_dir),
        "d_model": 32,
        "n_layers": 1,
        "n_heads": 2,
        "max_seq_len": 96,
        "batch_size": 4,
        "learning_rate": 3e-3,
        **settings,
    }
    return LocalComponent.from_config(config)


def toy_samples() -> list[TrajectorySample]:
    """A learnable task: the colour of each number's parity."""
    return [
        TrajectorySample(trajectory(f"colour {n}", "red" if n % 2 else "blue")) for n in range(8)
    ]


def reply_logprob(local: LocalComponent, prompt: str, reply: str) -> float:
    """The model's log probability of ``reply`` (its trained tokens) after ``prompt``."""
    (sequence,) = local.renderer.render_sample(trajectory(prompt, reply)).sequences
    with torch.no_grad():
        (values,) = token_logprobs(local.model, [sequence.token_ids], local.device)
    mask = torch.tensor(sequence.loss_mask[1:], dtype=torch.float32)
    return float((values * mask).sum())


def run(local: LocalComponent, job_id: str, samples: list[Any], **parameters: Any) -> Any:
    outcome = local.wait(local.submit(JobData(job_id, samples), parameters or None), timeout=60)
    assert outcome.component == "local"
    return outcome


def test_sft_loss_really_decreases(tmp_path: Path) -> None:
    """cross_entropy on a learnable toy task: the job loss and the replies' likelihood improve."""
    local = component(tmp_path)
    before = reply_logprob(local, "colour 3", "red")
    losses = []
    for job in range(8):
        outcome = run(local, f"toy:data:{job}", toy_samples())
        assert outcome.event == "finished", outcome.error
        assert outcome.metrics["steps"] == 2
        assert outcome.metrics["unrenderable_samples"] == 0
        losses.append(outcome.metrics["loss"])
    assert losses[-1] < 0.6 * losses[0]
    assert all(later < earlier for earlier, later in itertools.pairwise(losses))
    assert reply_logprob(local, "colour 3", "red") > before + 5


def test_policy_gradient_raises_the_probability_of_rewarded_replies(tmp_path: Path) -> None:
    """importance_sampling with group-centred advantages: the rewarded reply gains."""
    local = component(tmp_path, batch_size=8)
    prompt = "Yes or no?"

    def gap() -> float:
        return reply_logprob(local, prompt, "yes") - reply_logprob(local, prompt, "no")

    start = gap()
    for job in range(6):
        samples = [
            TrajectorySample(trajectory(prompt, reply), reward=reward, group_id=f"g{job}-{k}")
            for k in range(4)
            for reply, reward in (("yes", 1.0), ("no", 0.0))
        ]
        outcome = run(local, f"rl:data:{job}", samples, objective="importance_sampling")
        assert outcome.event == "finished", outcome.error
        assert outcome.metrics["mean_reward"] == 0.5
    assert gap() > start + 3


def test_rewards_are_centred_in_their_group() -> None:
    assert group_advantages([1.0, 0.0, 3.0, 1.0, 5.0], ["a", "a", "b", "b", None]) == [
        0.5,
        -0.5,
        1.0,
        -1.0,
        0.0,
    ]


def test_samples_without_a_finite_reward_do_not_train_a_policy_gradient(tmp_path: Path) -> None:
    """rule: P-UP-9: an objective that needs a reward needs a finite one
    (``reward``, else ``extra.reef.reward``); SFT needs none."""
    local = component(tmp_path)
    samples = [
        TrajectorySample(trajectory("q", "a")),
        TrajectorySample(trajectory("q", "b", reward=1.0)),
        TrajectorySample(trajectory("q", "c", reward="high")),
        TrajectorySample(trajectory("q", "d"), reward=0.0),
    ]
    outcome = run(local, "rl:data:0", samples, objective="importance_sampling")
    assert outcome.metrics["samples_without_reward"] == 2
    assert outcome.metrics["samples"] == 2
    assert run(local, "sft:data:0", samples).metrics["samples"] == 4


def test_unrenderable_samples_are_left_out_and_counted(tmp_path: Path) -> None:
    """rule: P-REND-5: over extra.reef.max_tokens, over the model's context, no reply to train."""
    local = component(tmp_path)
    copied = trajectory("q", "a")
    copied["steps"][1]["is_copied_context"] = True
    samples = [
        TrajectorySample(trajectory("q", "fits")),
        TrajectorySample(trajectory("q", "a", max_tokens=5)),
        TrajectorySample(trajectory("q", "x" * 200)),
        TrajectorySample(copied),
    ]
    outcome = run(local, "toy:data:0", samples)
    assert outcome.event == "finished"
    assert outcome.metrics["unrenderable_samples"] == 3
    assert outcome.metrics["samples"] == 1


def test_the_outcome_says_what_each_steps_loss_consumed(tmp_path: Path) -> None:
    """``metrics.consumed``: a line per sample and step, with the tokens its loss counted and
    the reward and advantage it trained with; a sample left out (unrenderable, no reward, or
    dropped by the schedule) has none."""
    local = component(tmp_path, batch_size=2)
    samples = [
        TrajectorySample(trajectory("q", "red"), reward=1.0, sample_id="s0", group_id="g"),
        TrajectorySample(trajectory("q", "blue"), reward=0.0, sample_id="s1", group_id="g"),
        TrajectorySample(trajectory("q", "x" * 200), reward=1.0, sample_id="long", group_id="g"),
        TrajectorySample(trajectory("q", "none"), sample_id="unrewarded", group_id="g"),
        TrajectorySample(trajectory("q", "green"), reward=0.5, sample_id="s4", group_id="h"),
    ]
    outcome = run(local, "rl:data:0", samples, objective="importance_sampling")
    consumed = {line["sample_id"]: line for line in outcome.metrics["consumed"]}
    assert set(consumed) == {"s0", "s1", "s4"}
    assert [consumed[s]["step"] for s in ("s0", "s1", "s4")] == [0, 0, 1]
    assert {s: consumed[s]["reward"] for s in consumed} == {"s0": 1.0, "s1": 0.0, "s4": 0.5}
    assert {s: consumed[s]["advantage"] for s in consumed} == {"s0": 0.5, "s1": -0.5, "s4": 0.0}
    replies = {"s0": "red", "s1": "blue", "s4": "green"}
    for sample_id, reply in replies.items():
        (sequence,) = local.renderer.render_sample(trajectory("q", reply)).sequences
        assert consumed[sample_id]["loss_tokens"] == sum(sequence.loss_mask[1:])
    assert (
        sum(line["loss_tokens"] for line in consumed.values())
        == (outcome.metrics["trained_tokens"])
    )
    sft = run(local, "sft:data:0", samples[:2], scheduling={"remainder": "drop"})
    assert [(line["sample_id"], line["reward"]) for line in sft.metrics["consumed"]] == [
        ("s0", None),
        ("s1", None),
    ]


@pytest.mark.parametrize(
    ("scheduling", "steps", "dropped"),
    [
        (None, 3, 0),
        ({"remainder": "train"}, 3, 0),
        ({"remainder": "drop"}, 2, 1),
        ({"remainder": "pad"}, 3, 0),
        ({"packing_length": 1000}, 1, 0),
    ],
)
def test_batches_follow_the_batch_size_and_the_scheduling_parameter(
    tmp_path: Path, scheduling: dict[str, Any] | None, steps: int, dropped: int
) -> None:
    """rule: P-SIZE-6: 7 samples at batch size 3 train 3 steps; a shorter last step follows
    ``remainder``; with ``packing_length`` a step trains packs of tokens."""
    local = component(tmp_path, batch_size=3)
    parameters = {} if scheduling is None else {"scheduling": scheduling}
    outcome = run(local, "toy:data:0", toy_samples()[:7], **parameters)
    assert outcome.metrics["steps"] == steps
    assert outcome.metrics["dropped_samples"] == dropped


def test_a_job_smaller_than_the_batch_trains_one_partial_step(tmp_path: Path) -> None:
    """rule: P-SIZE-6."""
    local = component(tmp_path, batch_size=8)
    outcome = run(local, "toy:data:0", toy_samples()[:2], scheduling={"remainder": "drop"})
    assert outcome.metrics["steps"] == 1
    assert outcome.metrics["samples"] == 2


def test_bad_parameters_refuse_the_submission(tmp_path: Path) -> None:
    local = component(tmp_path)
    with pytest.raises(PluginConfigError, match="remainder"):
        local.submit(JobData("toy:data:0", toy_samples()), {"scheduling": {"remainder": "x"}})
    with pytest.raises(PluginConfigError, match="objective"):
        local.submit(JobData("toy:data:0", toy_samples()), {"objective": "dpo"})
    assert local.poll(JobHandle("toy:data:0", "local")).event == "failed"  # never started


def test_same_seed_same_jobs_same_artifact(tmp_path: Path) -> None:
    """Deterministic with a seed; the artifact id is the weights' content hash
    (docs/decisions.md#artifacts)."""
    ids = []
    for name in ("a", "b"):
        local = component(tmp_path / name)
        run(local, "toy:data:0", toy_samples())
        ids.append(local.publish().artifact_id)
    assert ids[0] == ids[1]
    other_seed = component(tmp_path / "c", seed=1)
    assert other_seed.publish().artifact_id != ids[0]


def test_artifact_id_is_the_same_in_another_process_and_after_a_restart(tmp_path: Path) -> None:
    """docs/decisions.md#artifacts: the same weights have the same artifact_id everywhere."""
    local = component(tmp_path)
    handle = local.submit(JobData("toy:data:0", toy_samples()))
    local.wait(handle)
    artifact = local.publish()
    assert artifact.artifact_id.startswith("sha256:")
    local.close()
    restarted = component(tmp_path)
    assert restarted.publish() == artifact
    assert restarted.poll(handle) == local.poll(handle)  # the outcome survives the restart
    script = (
        "import sys, warnings; warnings.simplefilter('ignore');"
        "from pathlib import Path;"
        "from reef.components.artifacts import load_model_folder, weights_digest;"
        "print(weights_digest(load_model_folder(Path(sys.argv[1]))[0]))"
    )
    other = subprocess.run(
        [sys.executable, "-c", script, str(artifact.path)],
        check=True,
        capture_output=True,
        text=True,
    )
    assert other.stdout.strip() == artifact.artifact_id


def test_a_job_id_trains_once(tmp_path: Path) -> None:
    """Resubmitting a job that ended (also after a restart) trains nothing twice."""
    local = component(tmp_path)
    first = run(local, "toy:data:0", toy_samples())
    weights = weights_digest(local.model)
    assert run(local, "toy:data:0", toy_samples()) == first
    assert weights_digest(local.model) == weights
    local.close()
    restarted = component(tmp_path)
    assert run(restarted, "toy:data:0", toy_samples()) == first
    assert weights_digest(restarted.model) == weights


def test_a_failed_job_keeps_the_last_finished_weights(tmp_path: Path) -> None:
    local = component(tmp_path)
    run(local, "toy:data:0", toy_samples())
    before = local.publish().artifact_id
    outcome = run(local, "task:data:0", [TaskSample("t1", {"instruction": "x"})])
    assert outcome.event == "failed"
    assert "tasks" in (outcome.error or "")
    assert local.publish().artifact_id == before
    model, _ = load_model_folder(local.publish().path)
    assert weights_digest(model) == before
