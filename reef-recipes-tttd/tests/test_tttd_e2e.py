"""TTTD end to end: ``reef serve`` with the local engine and the local component (a TinyGPT),
the shipped toy runner reporting each step's grid over HTTP. The scores it finds rise."""

from __future__ import annotations

from pathlib import Path

import pytest

# The loop runs reef serve (the server extra) with the local component (the torch extra).
pytest.importorskip("torch")
pytest.importorskip("httpx")

from reef_tttd.testing import serve_toy
from reef_tttd.toy_runner import ToyRunner

STEPS, GROUPS, ROLLOUTS = 6, 2, 8


def test_the_scores_found_rise_over_the_steps(tmp_path: Path) -> None:
    with serve_toy(tmp_path, steps=STEPS, groups=GROUPS, rollouts=ROLLOUTS) as serve:
        runner = ToyRunner(serve.base_url, "discover", groups=GROUPS, rollouts=ROLLOUTS)
        results = runner.run_steps(STEPS)
        assert serve.terminate() == 0
    means = [r.as_json()["mean"] for r in results]
    first, last = sum(means[:2]) / 2, sum(means[-2:]) / 2
    assert last > first, means  # the policy learned to propose better attempts
    assert results[-1].best_so_far > max(results[0].scores), [r.as_json() for r in results]
