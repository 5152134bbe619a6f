"""The advantage estimators of the ``importance_sampling`` objective, computed per group.

A job's sample-to-job stage names the estimator in its job data's metadata (``advantage``,
parsed as :class:`AdvantageSettings`); without one, the estimator is ``group_mean``:

- ``group_mean`` (GRPO-style): each reward minus the mean reward of its group; with
  ``std_normalisation`` divided by the group's standard deviation (Bessel-corrected, as
  ``torch.std``) plus ``std_epsilon``: GRPO as TRL (``scale_rewards``, epsilon 1e-4) and verl
  (``norm_adv_by_std_in_grpo``, epsilon 1e-6) compute it. Without it, Dr. GRPO's advantage.
- ``none``: each reward as it is (OpenClaw-RL's binary reward; the job parameter
  ``reward_baseline: none`` asks for it).
- ``entropic`` (TTT-Discover's entropic objective, Yuksekgonul et al. 2026): within a group of
  ``K`` rewards ``r``, each rollout's weight is ``e_i = exp(beta * (r_i - max r))`` divided by
  the mean ``e`` of the *other* rollouts of the group (``leave_one_out``, as the published code
  does) or of the whole group (``mean``, the paper's expectation); the advantage is
  ``weight - 1``. ``beta`` is fixed, or chosen per group so that the reweighting
  ``q_i = e_i / sum(e)`` is ``kl_target`` nats from uniform (``KL(q || uniform) = ln 2`` by the
  published default), found by bisection. As ``beta`` grows the objective tends to the
  group's best reward; at 0 it is the mean.

Pure Python: nothing here needs PyTorch.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Final

import attrs

from reef.core.config import config_option
from reef.core.plugins import PluginSettings

#: The estimators, as job data metadata names them.
ESTIMATORS: Final = ("group_mean", "entropic", "none")
#: How an entropic weight is normalised.
NORMALISATIONS: Final = ("leave_one_out", "mean")
#: The published default of the adaptive rule: the reweighting's KL from uniform, in nats.
LN2: Final = math.log(2)
#: The largest beta the adaptive rule tries; a group that cannot reach the target gets it.
BETA_MAX: Final = 1e6
#: A leave-one-out denominator that is 0 (every other term underflows) is this instead.
_FLOOR: Final = 1e-12
#: Bisection rounds of the adaptive rule (the bracket halves each round).
_BISECTIONS: Final = 60


def _one_of(choices: Sequence[str]) -> Any:
    def check(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
        if value not in choices:
            raise ValueError(f"{attribute.name} must be one of {', '.join(choices)}, got {value!r}")

    return check


def _positive_or_none(_: object, attribute: attrs.Attribute[Any], value: float | None) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise ValueError(f"{attribute.name} must be a positive number or null, got {value!r}")


def _kl_target(_: object, attribute: attrs.Attribute[Any], value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{attribute.name} must be a positive number of nats, got {value!r}")


@attrs.frozen
class AdvantageSettings(PluginSettings):
    """The advantage estimator a job's data asks for (its metadata's ``advantage``)."""

    estimator: str = config_option(
        "group_mean",
        help="group_mean (reward minus its group's mean), entropic (TTT-Discover) or none",
        validator=_one_of(ESTIMATORS),
    )
    beta: float | None = config_option(
        None,
        help="entropic: a fixed inverse temperature; null chooses it per group by kl_target",
        validator=_positive_or_none,
    )
    kl_target: float = config_option(
        LN2,
        help="entropic with beta null: the KL (nats) of the group's reweighting from uniform",
        validator=_kl_target,
    )
    normalisation: str = config_option(
        "leave_one_out",
        help="entropic: divide by the mean of the other rollouts (leave_one_out) or of all (mean)",
        validator=_one_of(NORMALISATIONS),
    )
    std_normalisation: bool = config_option(
        False,
        help="group_mean: divide by the group's standard deviation plus std_epsilon (GRPO as "
        "TRL and verl run it; false: Dr. GRPO)",
    )
    std_epsilon: float = config_option(
        1e-6,
        help="group_mean with std_normalisation: added to the standard deviation (verl 1e-6, "
        "TRL 1e-4)",
        validator=attrs.validators.gt(0.0),
    )

    def __attrs_post_init__(self) -> None:
        if self.std_normalisation and self.estimator != "group_mean":
            raise ValueError(
                f"std_normalisation divides group_mean advantages, not {self.estimator}'s"
            )


def reweighting(rewards: Sequence[float], beta: float) -> list[float]:
    """``q_i = exp(beta * (r_i - max r)) / sum_j exp(beta * (r_j - max r))``: the group's
    reweighting, a distribution over its rollouts."""
    top = max(rewards)
    tilted = [math.exp(beta * (r - top)) for r in rewards]
    total = sum(tilted)
    return [t / total for t in tilted]


def kl_from_uniform(rewards: Sequence[float], beta: float) -> float:
    """``KL(q_beta || uniform)`` of the group's reweighting, in nats."""
    size = len(rewards)
    return sum(q * math.log(q * size) for q in reweighting(rewards, beta) if q > 0)


def adaptive_beta(rewards: Sequence[float], kl_target: float = LN2) -> float:
    """The beta whose reweighting is ``kl_target`` nats from uniform, by bisection.

    The KL grows with beta (from 0 at beta 0 towards ``ln(K / ties at the best)``); a group
    that cannot reach the target (one rollout, equal rewards, too many tied at the best) gets
    :data:`BETA_MAX`, where its weights are as sharp as they get.
    """
    if len(rewards) < 2:
        return BETA_MAX
    low, high = 0.0, 1.0
    while kl_from_uniform(rewards, high) < kl_target:
        if high >= BETA_MAX:
            return BETA_MAX
        low, high = high, min(high * 2.0, BETA_MAX)
    for _ in range(_BISECTIONS):
        middle = (low + high) / 2
        if kl_from_uniform(rewards, middle) < kl_target:
            low = middle
        else:
            high = middle
    return high


def entropic_weights(
    rewards: Sequence[float], beta: float, normalisation: str = "leave_one_out"
) -> list[float]:
    """Each rollout's entropic weight in its group (see the module's documentation).

    A group of one has weight 1 (advantage 0): there is nothing to compare it with.
    """
    size = len(rewards)
    if size < 2:
        return [1.0] * size
    top = max(rewards)
    tilted = [math.exp(beta * (r - top)) for r in rewards]
    if normalisation == "mean":
        total = math.fsum(tilted)
        return [t / (total / size) for t in tilted]
    # The best rollout's term is 1, so a denominator is 0 only when every other rollout's term
    # underflows (a group of two at a huge beta). The published code adds 1e-12 to every
    # denominator; here it replaces only a 0 one, so a tied group (every term 1, every
    # denominator exactly 1) has weights of exactly 1: no signal, no step (its advantages would
    # be -1e-12 otherwise). The difference elsewhere is 1e-12 relative. The others' sum is
    # added up afresh for each rollout: the whole sum minus one term would lose the small
    # terms next to the best one's 1.
    weights = []
    for i, t in enumerate(tilted):
        others = math.fsum(tilted[:i] + tilted[i + 1 :]) / (size - 1)
        weights.append(t / (others if others > 0 else _FLOOR))
    return weights


def _groups(groups: Sequence[str | None]) -> dict[str | None, list[int]]:
    members: dict[str | None, list[int]] = defaultdict(list)
    for index, group in enumerate(groups):
        members[group].append(index)
    return members


def group_advantages(
    rewards: Sequence[float],
    groups: Sequence[str | None],
    settings: AdvantageSettings | None = None,
) -> list[float]:
    """Each reward's advantage within its group, by ``settings``' estimator (``group_mean``
    when ``None``).

    Samples without a group form one group together: the job's ungrouped samples are compared
    with each other, so a recipe that does not group still learns which replies scored better.
    A group whose rewards all tie has advantages of exactly 0 whatever the estimator.
    """
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards for {len(groups)} groups")
    settings = settings or AdvantageSettings()
    if settings.estimator == "none":
        return list(rewards)
    advantages = [0.0] * len(rewards)
    for indexes in _groups(groups).values():
        values = [rewards[i] for i in indexes]
        if min(values) == max(values):
            # A tied group has no signal under any estimator: exactly 0 (a mean of equal floats
            # is not always the float itself), so the component takes no optimizer step.
            continue
        if settings.estimator == "group_mean":
            mean = sum(values) / len(values)
            computed = [value - mean for value in values]
            if settings.std_normalisation:
                # The unbiased standard deviation (torch.std), as TRL and verl take it.
                spread = math.sqrt(sum(c * c for c in computed) / (len(values) - 1))
                computed = [c / (spread + settings.std_epsilon) for c in computed]
        else:
            beta = settings.beta
            if beta is None:
                beta = adaptive_beta(values, settings.kl_target)
            weights = entropic_weights(values, beta, settings.normalisation)
            computed = [weight - 1.0 for weight in weights]
        for index, advantage in zip(indexes, computed, strict=True):
            advantages[index] = advantage
    return advantages
