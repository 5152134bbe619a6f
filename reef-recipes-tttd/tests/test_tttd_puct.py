"""The toy runner's state reuse, TTT-Discover's PUCT archive, against the published sampler's
formula (``tinker_cookbook/recipes/ttt/sampler.py``, ``PUCTSampler``) written here."""

from __future__ import annotations

import math

import pytest

from reef_tttd.puct import Child, PUCTArchive


def _reference_scores(archive: PUCTArchive) -> dict[str, float]:
    """score(i) = Q(i) + c * scale * P(i) * sqrt(1 + T/G) / (1 + n[i]/G), G = 1."""
    states = archive.states
    values = [s.value for s in states]
    grown = [s.value for s in states if s.id not in archive.initial] or values
    scale = max(max(grown) - min(grown), 1e-6)
    order = sorted(range(len(values)), key=lambda i: -values[i])
    prior = [0.0] * len(values)
    for rank, i in enumerate(order):
        prior[i] = len(values) - rank
    total = sum(prior)
    scores = {}
    for i, s in enumerate(states):
        n = archive.visits.get(s.id, 0)
        q = archive.best_reached[s.id] if n > 0 else s.value
        bonus = archive.c * scale * prior[i] / total * math.sqrt(1 + archive.expansions) / (1 + n)
        scores[s.id] = q + bonus
    return scores


def test_the_scores_are_the_published_samplers() -> None:
    archive = PUCTArchive([("", 0.0)], c=1.0)
    (root,) = archive.sample(2)
    assert root.text == ""
    archive.update([Child(root, t, v) for t, v in [("ab", 0.5), ("a", 1.0), ("xyz", 0.0)]])
    # The root kept its two best children; its best reached score is 1, visited once.
    assert sorted(s.text for s in archive.states) == ["", "a", "ab"]
    assert archive.best_reached == {"s0": 1.0}
    assert archive.visits == {"s0": 1}
    # One per lineage (a state, its ancestors, its descendants): the two children are
    # siblings, each blocks the root, neither blocks the other.
    assert {s.text for s in archive.sample(3)} == {"a", "ab"}
    child = next(s for s in archive.states if s.text == "a")
    archive.update([Child(child, "aa", 0.9), Child(child, "a", 1.0)])  # "a" is there already
    assert archive.visits == {"s0": 2, child.id: 1}  # the child and its ancestor
    assert archive.expansions == 2
    got = {state.id: score for score, state in archive.scores()}
    assert got == pytest.approx(_reference_scores(archive), abs=1e-9)
    ranked = [state.id for _, state in archive.scores()]
    assert ranked == sorted(got, key=lambda i: got[i], reverse=True)


def test_the_archive_keeps_its_initial_states_and_its_best() -> None:
    archive = PUCTArchive([("", 0.0)], topk_children=0, max_size=3)
    (root,) = archive.sample(1)
    archive.update([Child(root, f"t{v}", v / 10) for v in range(6)])
    assert sorted(s.text for s in archive.states) == ["", "t4", "t5"]


def test_the_kl_penalty_is_a_centred_kl_to_the_base_model() -> None:
    from reef import PluginConfigError
    from reef_tttd.recipe import TTTDRecipe, TTTDRecipeSettings

    assert TTTDRecipe.job_parameters_of(TTTDRecipeSettings()) == {
        "objective": "importance_sampling"
    }
    settings = TTTDRecipeSettings.parse(
        {"kl_penalty_coef": 0.1, "base_model": "/models/base"}, plugin_class=TTTDRecipe
    )
    distillation = TTTDRecipe.job_parameters_of(settings)["distillation"]
    assert distillation["teacher"]["model_path"] == "/models/base"
    assert (distillation["kl_coef"], distillation["reward_coef"]) == (0.1, 1.0)
    assert distillation["kl_centred"] is True
    with pytest.raises(PluginConfigError, match="base_model"):
        TTTDRecipeSettings.parse({"kl_penalty_coef": 0.1}, plugin_class=TTTDRecipe)
