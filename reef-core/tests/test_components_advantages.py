"""The advantage estimators: TTT-Discover's entropic weights as properties (hypothesis), the
estimator a job's data names reaching the component, and a bad one refused."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from reef.components.advantages import (
    BETA_MAX,
    LN2,
    AdvantageSettings,
    adaptive_beta,
    entropic_weights,
    group_advantages,
    kl_from_uniform,
    reweighting,
)
from reef.core.job_data import JobData, TrajectorySample
from reef.core.plugins import PluginConfigError
from reef.testing.samples import exchange

REWARDS = st.lists(
    st.floats(-50, 50, allow_nan=False, allow_infinity=False), min_size=1, max_size=12
)
BETAS = st.floats(0.01, 20)
NORMALISATIONS = st.sampled_from(["leave_one_out", "mean"])


@given(REWARDS, BETAS)
def test_the_reweighting_is_a_distribution(rewards: list[float], beta: float) -> None:
    q = reweighting(rewards, beta)
    assert math.isclose(sum(q), 1.0, rel_tol=1e-9)
    assert all(0 <= value <= 1 for value in q)


@given(REWARDS, BETAS)
def test_mean_normalised_weights_sum_to_the_group_size(rewards: list[float], beta: float) -> None:
    # The paper's weight exp(beta r) / E[exp(beta r)]: its mean is 1, so the advantages sum to 0.
    weights = entropic_weights(rewards, beta, "mean")
    assert math.isclose(sum(weights), len(rewards), rel_tol=1e-9)
    settings = AdvantageSettings(estimator="entropic", beta=beta, normalisation="mean")
    advantages = group_advantages(rewards, ["g"] * len(rewards), settings)
    assert abs(sum(advantages)) <= 1e-9 * len(rewards) * max(1.0, max(weights))


@given(REWARDS.filter(lambda r: len(r) >= 2), BETAS)
def test_leave_one_out_weights_divide_by_the_other_rollouts(
    rewards: list[float], beta: float
) -> None:
    # The published estimator: each weight is its term over the mean term of the others; the
    # weights then sum to at least the group size (Jensen), equality when all rewards tie.
    top = max(rewards)
    terms = [math.exp(beta * (r - top)) for r in rewards]
    weights = entropic_weights(rewards, beta, "leave_one_out")
    for index, (term, weight) in enumerate(zip(terms, weights, strict=True)):
        others = [t for j, t in enumerate(terms) if j != index]
        denominator = sum(others) / len(others)
        assert math.isclose(weight * (denominator or 1e-12), term, rel_tol=1e-9)
    if all(t > 1e-6 for t in terms):  # no term so small that the floor matters
        assert sum(weights) >= len(rewards) * (1 - 1e-9)


@given(
    st.floats(-50, 50, allow_nan=False),
    st.integers(1, 16),
    st.one_of(st.none(), BETAS),
    NORMALISATIONS,
)
def test_a_tied_group_has_advantages_of_exactly_zero(
    reward: float, size: int, beta: float | None, normalisation: str
) -> None:
    # No signal is exactly 0 (so the component takes no optimizer step), not -1e-12 (the
    # published code's floor on every denominator).
    for estimator in ("entropic", "group_mean"):
        settings = AdvantageSettings(estimator=estimator, beta=beta, normalisation=normalisation)
        assert group_advantages([reward] * size, ["g"] * size, settings) == [0.0] * size


@given(REWARDS, st.one_of(st.none(), BETAS), NORMALISATIONS)
def test_a_better_rollout_never_has_a_smaller_advantage(
    rewards: list[float], beta: float | None, normalisation: str
) -> None:
    settings = AdvantageSettings(estimator="entropic", beta=beta, normalisation=normalisation)
    advantages = group_advantages(rewards, [None] * len(rewards), settings)
    best = rewards.index(max(rewards))
    assert advantages[best] == max(advantages)
    for i, j in itertools.permutations(range(len(rewards)), 2):
        if rewards[i] > rewards[j]:
            assert advantages[i] >= advantages[j]


@given(REWARDS, st.floats(0.05, 2.0))
def test_the_adaptive_beta_puts_the_reweighting_kl_target_from_uniform(
    rewards: list[float], kl_target: float
) -> None:
    beta = adaptive_beta(rewards, kl_target)
    if len(rewards) >= 2 and kl_from_uniform(rewards, BETA_MAX) > kl_target + 1e-6:
        assert math.isclose(kl_from_uniform(rewards, beta), kl_target, abs_tol=1e-6)
    else:  # the target is out of reach (ties, one rollout): the sharpest weights
        assert beta == BETA_MAX


def test_the_published_default_is_ln_2() -> None:
    settings = AdvantageSettings(estimator="entropic")
    assert settings.kl_target == LN2 == math.log(2)
    rewards = [0.1, 0.5, 0.2, 0.9, 0.3]
    assert math.isclose(kl_from_uniform(rewards, adaptive_beta(rewards)), math.log(2))


def test_groups_are_computed_apart() -> None:
    settings = AdvantageSettings(estimator="entropic", beta=2.0)
    both = group_advantages([1.0, 0.0, 5.0, 3.0], ["a", "a", "b", "b"], settings)
    assert both[:2] == group_advantages([1.0, 0.0], ["a", "a"], settings)
    assert both[2:] == group_advantages([5.0, 3.0], ["b", "b"], settings)
    assert group_advantages([4.0], ["alone"], settings) == [0.0]
    as_is = AdvantageSettings(estimator="none")  # OpenClaw-RL's binary reward, as it is
    assert group_advantages([1.0, 0.0, 1.0], ["a", "a", "b"], as_is) == [1.0, 0.0, 1.0]


def test_a_bad_estimator_is_refused_naming_the_key() -> None:
    with pytest.raises(PluginConfigError) as info:
        AdvantageSettings.parse(
            {"estimator": "entropic", "beta": -1}, plugin_class=object, path="$.advantage"
        )
    assert info.value.key == "$.advantage.beta"
    with pytest.raises(PluginConfigError, match="group_mean, entropic"):
        AdvantageSettings.parse({"estimator": "best"}, plugin_class=object)


def _rewarded_job(job_id: str, advantage: dict[str, object] | None) -> JobData:
    rewards = [0.1, 0.9, 0.4, 0.2, 0.7, 0.3]
    samples = [
        TrajectorySample(
            exchange(f"say {n}", "ok"), reward=r, sample_id=f"s{n}", group_id=f"g{n % 2}"
        )
        for n, r in enumerate(rewards)
    ]
    return JobData(job_id, tuple(samples), metadata={"advantage": advantage} if advantage else {})


def test_the_job_datas_estimator_reaches_the_component(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from reef.components.local.component import LocalComponent

    settings = {"d_model": 16, "n_layers": 1, "n_heads": 2, "max_seq_len": 64, "batch_size": 6}
    local = LocalComponent.from_config({"state_dir": str(tmp_path), **settings})
    try:
        advantage = {"estimator": "entropic", "beta": None}
        data = _rewarded_job("entropic", advantage)
        parameters = {"objective": "importance_sampling"}
        outcome = local.wait(local.submit(data, parameters), timeout=120)
        assert outcome.event == "finished", outcome.error
        trained = {line["sample_id"]: line["advantage"] for line in outcome.metrics["consumed"]}
        expected = group_advantages(
            [s.reward for s in data.samples],  # type: ignore[union-attr]
            [s.group_id for s in data.samples],
            AdvantageSettings(estimator="entropic"),
        )
        assert trained == {s.sample_id: a for s, a in zip(data.samples, expected, strict=True)}
        bad = _rewarded_job("bad", {"estimator": "entropic", "kl_target": 0})
        failed = local.wait(local.submit(bad, parameters), timeout=120)
        assert failed.event == "failed"
        assert "$.metadata.advantage.kl_target" in (failed.error or "")
    finally:
        local.close()
