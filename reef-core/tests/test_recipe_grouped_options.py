"""GRPO's options in the ``grouped`` recipe, each against an independent implementation of the
reference's equations written here (TRL ``trl/trainer/grpo_trainer.py``, verl
``verl/trainer/ppo/core_algos.py``, slime ``slime/backends/megatron_utils/loss.py``), equal to
1e-6; and DAPO's dynamic sampling, whose tied groups end counted, never silently."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from reef.components.advantages import AdvantageSettings, group_advantages  # noqa: E402
from reef.components.local.objectives import batch_loss, sequence_weights  # noqa: E402
from reef.core.job_data import JobData, TrajectorySample  # noqa: E402
from reef.core.plugins import PluginConfigError  # noqa: E402
from reef.pipeline_context import PipelineContext  # noqa: E402
from reef.recipe.grouped.processor import GroupedJobData, ReportGroups  # noqa: E402
from reef.recipe.grouped.recipe import GroupedRecipe, GroupedRecipeSettings  # noqa: E402
from reef.record2sample import ReportSamples  # noqa: E402
from reef.storage import Database, TrainerSamples  # noqa: E402
from reef.testing.components import tiny_local_component  # noqa: E402
from reef.testing.records import call, report  # noqa: E402
from reef.train.pipeline import TrainingPipeline  # noqa: E402


def _reference_advantages(rewards: list[float], size: int, epsilon: float | None) -> list[float]:
    """TRL/verl: ``(r - mean) / (std + eps)`` per group of ``size`` (``torch.std``, unbiased);
    without ``epsilon``, Dr. GRPO's ``r - mean``."""
    grouped = torch.tensor(rewards, dtype=torch.float64).view(-1, size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    if epsilon is not None:
        centred = centred / (grouped.std(dim=1, keepdim=True) + epsilon)
    return [float(v) for v in centred.flatten()]


@pytest.mark.parametrize("epsilon", [1e-4, 1e-6, None])
def test_std_normalised_advantages_are_trl_and_verls(epsilon: float | None) -> None:
    generator = random.Random(7)
    for _ in range(200):
        size = generator.randint(2, 8)
        rewards = [generator.choice([0.0, 0.5, 1.0, generator.random()]) for _ in range(4 * size)]
        groups = [f"g{i // size}" for i in range(len(rewards))]
        settings = AdvantageSettings(
            std_normalisation=epsilon is not None, std_epsilon=epsilon or 1e-6
        )
        got = group_advantages(rewards, groups, settings)
        assert got == pytest.approx(_reference_advantages(rewards, size, epsilon), abs=1e-6)


def _reference_loss(
    aggregation: str,
    logprobs: Any,
    old: Any,
    advantages: Any,
    mask: Any,
    samples: list[int],
    clip: tuple[float, float],
    norm: int,
) -> float:
    """verl's ``compute_policy_loss`` (the clipped ratio) then ``agg_loss`` by its mode
    (``token-mean``, ``seq-mean-token-mean``, ``seq-mean-token-sum-norm``), and slime's
    per-sample mean (each sample's token mean over all its rows, averaged over samples)."""
    ratio = torch.exp(logprobs - old)
    losses = torch.maximum(
        -advantages[:, None] * ratio,
        -advantages[:, None] * torch.clamp(ratio, 1 - clip[0], 1 + clip[1]),
    )
    if aggregation == "token_mean":
        return float((losses * mask).sum() / mask.sum())
    if aggregation == "sequence_mean":
        return float(((losses * mask).sum(-1) / mask.sum(-1)).mean())
    if aggregation == "token_sum_norm":
        return float(((losses * mask).sum(-1) / norm).mean())
    per_sample = []
    for sample in sorted(set(samples)):
        rows = [i for i, s in enumerate(samples) if s == sample]
        per_sample.append((losses[rows] * mask[rows]).sum() / mask[rows].sum())
    return float(torch.stack(per_sample).mean())


@pytest.mark.parametrize(
    "aggregation", ["token_mean", "sequence_mean", "sample_mean", "token_sum_norm"]
)
def test_the_loss_aggregations_are_the_references(aggregation: str) -> None:
    torch.manual_seed(3)
    rows, length = 6, 9
    samples = [0, 0, 1, 2, 2, 3]  # samples 0 and 2 have two sequences each
    lengths = [9, 4, 7, 2, 5, 8]
    mask = torch.tensor([[1.0] * n + [0.0] * (length - n) for n in lengths], dtype=torch.float64)
    old = -torch.rand(rows, length, dtype=torch.float64) * 3
    logprobs = old + torch.randn(rows, length, dtype=torch.float64) * 0.4
    advantages = torch.randn(rows, dtype=torch.float64)
    clip = (0.2, 0.28)
    refs = [(samples[i], i) for i in range(rows)]
    weights = sequence_weights(
        aggregation, refs, lambda r: lengths[r[1]], divisor=float(sum(lengths)), norm_tokens=16
    )
    got = batch_loss(
        "ppo",
        logprobs,
        mask,
        start_logprobs=old,
        advantages=advantages,
        clip=clip,
        row_weights=torch.tensor([weights[r] for r in refs], dtype=torch.float64),
    )
    expected = _reference_loss(aggregation, logprobs, old, advantages, mask, samples, clip, 16)
    assert float(got) == pytest.approx(expected, abs=1e-6)


def _job(job_id: str) -> JobData:
    rewards = [0.0, 1.0, 0.0, 0.5, 1.0, 1.0, 0.0, 0.25]
    replies = ["a", "bbbbbb", "cc", "dddd", "e", "ffffffffff", "ggg", "hh"]
    return JobData(
        job_id,
        tuple(
            TrajectorySample(
                {
                    "schema_version": "ATIF-v1.8",
                    "agent": {"name": "toy", "version": "1"},
                    "steps": [
                        {"step_id": 1, "source": "user", "message": f"q{n}"},
                        {"step_id": 2, "source": "agent", "message": reply},
                    ],
                },
                reward=reward,
                sample_id=f"s{n}",
                group_id=f"g{n // 4}",
            )
            for n, (reward, reply) in enumerate(zip(rewards, replies, strict=True))
        ),
        metadata={"advantage": {"std_normalisation": True, "std_epsilon": 1e-4}},
    )


@pytest.mark.parametrize(
    ("config", "aggregate"),
    [
        ({}, lambda a, n: sum(x * k for x, k in zip(a, n, strict=True)) / sum(n)),
        ({"loss_aggregation": "sequence_mean"}, lambda a, n: sum(a) / len(a)),
        (
            {"loss_aggregation": "token_sum_norm", "loss_norm_tokens": 32},
            lambda a, n: sum(x * k for x, k in zip(a, n, strict=True)) / 32 / len(a),
        ),
        ({"objective": "ppo", "clip_low": 0.2, "clip_high": 0.28}, None),
    ],
)
def test_the_recipes_config_trains_the_loss_it_names(
    tmp_path: Path, config: dict[str, Any], aggregate: Any
) -> None:
    # At a job's first step the ratio is 1, so the loss is -(aggregated advantage).
    settings = GroupedRecipeSettings.parse(config, plugin_class=GroupedRecipe)
    parameters = GroupedRecipe.job_parameters_of(settings)
    local = tiny_local_component(tmp_path, batch_size=8)
    try:
        outcome = local.wait(local.submit(_job("j"), parameters), timeout=120)
    finally:
        local.close()
    assert outcome.event == "finished", outcome.error
    lines = sorted(outcome.metrics["consumed"], key=lambda line: line["sample_id"])
    rewards = [line["reward"] for line in lines]
    advantages = _reference_advantages(rewards, 4, 1e-4)
    assert [line["advantage"] for line in lines] == pytest.approx(advantages, abs=1e-6)
    tokens = [line["loss_tokens"] for line in lines]
    aggregate = aggregate or (lambda a, n: sum(x * k for x, k in zip(a, n, strict=True)) / sum(n))
    assert outcome.metrics["step_losses"][0] == pytest.approx(-aggregate(advantages, tokens),
                                                              abs=1e-6)  # fmt: skip
    if config.get("objective") == "ppo":
        assert (parameters["clip_low"], parameters["clip_high"]) == (0.2, 0.28)


def test_token_sum_norm_needs_its_constant() -> None:
    with pytest.raises(PluginConfigError, match="loss_norm_tokens"):
        GroupedRecipeSettings.parse({"loss_aggregation": "token_sum_norm"}, plugin_class=object)
    with pytest.raises(PluginConfigError, match="std_normalisation"):
        AdvantageSettings.parse(
            {"estimator": "entropic", "std_normalisation": True}, plugin_class=object
        )


def test_dynamic_sampling_ends_tied_groups_counted(storage_database: Database) -> None:
    """rule: P-STALE-1 a group DAPO's dynamic sampling leaves out is counted by its reason
    (no_signal), in status and durably; a group with a signal trains."""
    context = PipelineContext("s", "c", (), "auto", has_runtime_loader=True)
    stage = ReportSamples(context, ReportGroups(2, dynamic_sampling=True), max_staleness=0)
    pipeline = TrainingPipeline(
        stage,
        GroupedJobData(context, job_samples=2),
        samples=TrainerSamples(storage_database, "s"),
        context=context,
    )
    for name, group, score in [("a", "tied", 1.0), ("b", "tied", 1.0), ("c", "g", 0.0),
                               ("d", "g", 1.0)]:  # fmt: skip
        pipeline.push(call(f"{name}.c", session=name, artifact="art1"))
        pipeline.push(report(name, f"{name}.c", score=score, group=group))
    data = pipeline.build_job_data(1)
    assert data is not None
    assert sorted(s.reward for s in data.samples) == [0.0, 1.0]  # type: ignore[union-attr]
    assert pipeline.status()["ending_records"] == {"no_signal": 4}  # two reports, two calls
    pipeline.acknowledge(data.id, released_record_ids=pipeline.releasable_record_ids())
    assert pipeline.status()["dropped"] == {"no_signal": 4}
