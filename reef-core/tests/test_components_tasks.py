"""Task jobs in the local component: each task rolled out on the component's own sampler at
the job's start weights, scored by its verifier in the sandbox, and trained as groups with the
``task_group`` objective on the rollouts' own tokens and log probabilities."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, strategies as st

torch = pytest.importorskip("torch")

from reef.components.local.component import LocalComponent  # noqa: E402
from reef.components.local.objectives import token_logprobs  # noqa: E402
from reef.components.local.task_training import RolloutBatch, model_sampler  # noqa: E402
from reef.components.task_rollouts import (  # noqa: E402
    Rollout,
    TaskRollouts,
    task_group_advantages,
)
from reef.containers.agent import AnswerAgent  # noqa: E402
from reef.core.job_data import JobData, TaskSample  # noqa: E402
from reef.core.plugins import PluginConfigError  # noqa: E402
from reef.testing.task_engines import (  # noqa: E402
    coin_task as task,
    task_rollout as rollout,
)

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup does)"
)


def component(state_dir: Path) -> LocalComponent:
    return LocalComponent.from_config(
        {
            "state_dir": str(state_dir),
            "d_model": 32,
            "n_layers": 1,
            "n_heads": 2,
            "max_seq_len": 128,
            "batch_size": 8,
            "learning_rate": 3e-3,
        }
    )


def run(local: LocalComponent, samples: list[TaskSample], **parameters: Any) -> Any:
    job = JobData("tasks:data:0", tuple(samples))
    return local.wait(local.submit(job, {"objective": "task_group", **parameters}), timeout=300)


@given(st.lists(st.tuples(st.sampled_from("abc"), st.floats(-5, 5)), max_size=12))
def test_task_group_rewards_are_centred_and_scaled_within_each_task(
    values: list[tuple[str, float]],
) -> None:
    # rule: P-TASK-18 — the task_group objective centres and scales rewards within a group.
    rollouts = [Rollout(0, name, (1,), (2,), (0.0,), reward) for name, reward in values]
    advantages = task_group_advantages(rollouts)
    for name in "abc":
        members = [i for i, r in enumerate(rollouts) if r.task == name]
        if len(members) < 2:
            assert not set(members) & set(advantages)  # no group of one trains (P-TASK-14)
            continue
        group = [advantages[i] for i in members]
        assert math.isclose(sum(group), 0.0, abs_tol=1e-6)
        rewards = [rollouts[i].reward for i in members]
        if max(rewards) - min(rewards) > 1e-3:
            spread = math.sqrt(sum(a * a for a in group) / len(group))
            assert math.isclose(spread, 1.0, rel_tol=1e-6)


def test_a_rollout_trains_its_sampler_log_probabilities_as_they_are(tmp_path: Path) -> None:
    # rule: P-REND-6 — the sampler's log probabilities are the start weights' own, on the
    # positions of the reply's tokens.
    local = component(tmp_path)
    sample = model_sampler(local.model, local.renderer)
    request = AnswerAgent(max_tokens=6).request("What is 2 + 3?")
    prompt, replies = sample(request, 3)
    for reply in replies:
        ids = [*prompt, *reply.token_ids]
        again = token_logprobs(local.model, [ids], local.device)[0][len(prompt) - 1 :]
        assert again.tolist() == pytest.approx(list(reply.logprobs), abs=1e-4)
    # The batch the job trains holds exactly those tokens, and those values on the rows whose
    # tokens train.
    done = TaskRollouts(
        tuple(
            Rollout(0, "t", prompt, reply.token_ids, reply.logprobs, float(i))
            for i, reply in enumerate(replies)
        ),
        {},
        {},
    )
    batch = RolloutBatch.of(done, local.device)
    for sequence, row, reply in zip(batch.sequences, batch.start, replies, strict=True):
        assert sequence.token_ids == (*prompt, *reply.token_ids)
        mask = torch.tensor(sequence.loss_mask[1:], dtype=torch.float32)
        recomputed = token_logprobs(local.model, [sequence.token_ids], local.device)[0]
        assert (row * mask).tolist() == pytest.approx((recomputed * mask).tolist(), abs=1e-4)


#: Scores 1 when the reply's first byte is even: about half of an untrained model's replies, so
#: a task's group of 8 rollouts almost never scores alike and its advantages are not all 0.
PARITY_VERIFIER = """\
byte=$(head -c 1 /app/answer.txt | od -An -tu1 | tr -d ' \\n')
if [ -n "$byte" ] && [ $((byte % 2)) -eq 0 ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""


@needs_bwrap
def test_a_task_job_rolls_out_scores_trains_and_reports_rewards(tmp_path: Path) -> None:
    # rule: P-TASK-14 — rolled out at the job's start weights, groups of at least two,
    # rollout_rewards in the metrics; rule: P-STALE-4 — each rollout names its artifact.
    local = component(tmp_path)
    start = local.publish().artifact_id
    tasks = [task("first", PARITY_VERIFIER), task("second", PARITY_VERIFIER)]
    outcome = run(local, tasks, rollout=rollout(rollouts_per_task=8))
    assert outcome.event == "finished", outcome.error
    metrics = outcome.metrics
    assert set(metrics["rollout_rewards"]) == {"first", "second"}
    assert all(len(r) == 8 for r in metrics["rollout_rewards"].values())
    assert all(v in (0.0, 1.0) for r in metrics["rollout_rewards"].values() for v in r)
    # A group whose rewards differ: the job trained on advantages, not weight decay alone.
    assert any(len(set(r)) == 2 for r in metrics["rollout_rewards"].values())
    assert metrics["rollout_failures"] == {}
    assert {r["training"]["artifact_id"] for r in metrics["rollouts"]} == {start}
    assert metrics["samples"] == 16
    assert metrics["trained_tokens"] > 0
    assert local.publish().artifact_id != start  # it trained


@needs_bwrap
def test_a_verifier_timeout_scores_the_configured_reward(tmp_path: Path) -> None:
    # rule: P-TASK-7
    slow = task("slow", test="sleep 30\n", toml="[verifier]\ntimeout_sec = 1\n")
    outcome = run(
        component(tmp_path),
        [slow],
        rollout=rollout(rollouts_per_task=2, verifier_timeout_reward=0.25),
    )
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics["rollout_rewards"] == {"slow": [0.25, 0.25]}


def test_a_task_whose_sandbox_fails_is_an_infrastructure_failure(tmp_path: Path) -> None:
    nowhere = {"backend": "docker", "docker_url": f"unix://{tmp_path}/no-daemon.sock"}
    outcome = run(component(tmp_path), [task("lost")], rollout=rollout(sandbox=nowhere))
    assert outcome.event == "finished", outcome.error
    assert outcome.metrics["rollout_rewards"] == {}
    failure = outcome.metrics["rollout_failures"]["lost"]
    assert failure["infrastructure_failure"] is True
    assert "Docker daemon" in failure["error"]


def test_task_group_needs_its_rollout_parameter(tmp_path: Path) -> None:
    local = component(tmp_path)
    with pytest.raises(PluginConfigError, match="rollout"):
        local.submit(JobData("tasks:data:0", (task("a"),)), {"objective": "task_group"})
