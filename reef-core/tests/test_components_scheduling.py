"""Cutting a job into optimizer steps (reef.components.scheduling); no torch needed."""

from __future__ import annotations

import pytest

from reef.components.interface import Scheduling
from reef.components.scheduling import plan_steps


def test_units_are_samples_cut_by_the_batch_size() -> None:
    """rule: P-SIZE-6: a sample with two sequences is one unit."""
    plan = plan_steps([[5], [5, 6], [5], [5]], batch_size=3, scheduling=Scheduling())
    assert [step.units for step in plan.steps] == [
        (((0, 0),), ((1, 0), (1, 1)), ((2, 0),)),
        (((3, 0),),),
    ]
    assert [step.share for step in plan.steps] == [3, 1]


@pytest.mark.parametrize(
    ("remainder", "shares", "dropped"),
    [("train", [2, 2, 1], 0), ("drop", [2, 2], 1), ("pad", [2, 2, 2], 0)],
)
def test_remainder_decides_the_shorter_last_step(
    remainder: str, shares: list[int], dropped: int
) -> None:
    """rule: P-SIZE-6."""
    plan = plan_steps([[4]] * 5, batch_size=2, scheduling=Scheduling(remainder=remainder))
    assert [step.share for step in plan.steps] == shares
    assert plan.dropped_samples == dropped


def test_a_job_smaller_than_one_batch_is_one_partial_step_whatever_the_remainder() -> None:
    """rule: P-SIZE-6."""
    plan = plan_steps([[4]] * 2, batch_size=8, scheduling=Scheduling(remainder="drop"))
    assert len(plan.steps) == 1
    assert plan.dropped_samples == 0


def test_packing_length_makes_steps_of_packs_of_tokens() -> None:
    """rule: P-SIZE-6: with packing_length a step trains batch-size packs."""
    plan = plan_steps(
        [[6], [3], [4], [9], [2]], batch_size=2, scheduling=Scheduling(packing_length=10)
    )
    assert [step.units for step in plan.steps] == [
        (((0, 0), (1, 0)), ((2, 0),)),
        (((3, 0),), ((4, 0),)),
    ]


def test_scheduling_refuses_unknown_values() -> None:
    with pytest.raises(ValueError, match="remainder"):
        Scheduling(remainder="round")
    with pytest.raises(ValueError, match="packing_length"):
        Scheduling(packing_length=0)
