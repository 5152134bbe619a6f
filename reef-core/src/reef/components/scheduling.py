"""Cutting a job's rendered samples into optimizer steps (P-SIZE-6).

A step trains ``batch_size`` units. A unit is one sample (all its sequences) or, with the
scheduling parameter's ``packing_length``, one pack: the next sequences, in job order, whose
tokens fit in ``packing_length`` (a sequence longer than that is a pack by itself). A job with
fewer units than the batch size trains one partial step; ``remainder`` decides what a shorter
last step does.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from reef.components.interface import Scheduling

#: A sequence of the job: (sample position among the rendered samples, sequence index).
SequenceRef = tuple[int, int]


@attrs.frozen
class PlannedStep:
    """One optimizer step.

    :ivar units: the step's units, each the sequences it trains.
    :ivar share: the step's loss is divided by its trained tokens times ``batch_size / share``:
        ``share`` is its number of units, or the batch size when ``remainder`` pads it.
    """

    units: tuple[tuple[SequenceRef, ...], ...]
    share: int

    @property
    def sequences(self) -> tuple[SequenceRef, ...]:
        """Every sequence the step trains, in order."""
        return tuple(ref for unit in self.units for ref in unit)

    def loss_divisor(self, trained_tokens: int, batch_size: int) -> float:
        """What the step's summed token loss is divided by, so that every component's loss is
        a mean over trained tokens: ``trained_tokens``, times ``batch_size / units`` for a
        padded step (whose loss then weighs what its units would in a full step)."""
        if self.share != len(self.units):
            return trained_tokens * batch_size / len(self.units)
        return float(trained_tokens)


@attrs.frozen
class StepPlan:
    """The steps of a job, and the samples that the ``drop`` remainder left out."""

    steps: tuple[PlannedStep, ...]
    dropped_samples: int


def _units(lengths: Sequence[Sequence[int]], packing_length: int | None) -> list[list[SequenceRef]]:
    if packing_length is None:
        return [[(s, i) for i in range(len(seqs))] for s, seqs in enumerate(lengths)]
    packs: list[list[SequenceRef]] = []
    pack: list[SequenceRef] = []
    used = 0
    for s, seqs in enumerate(lengths):
        for i, length in enumerate(seqs):
            if pack and used + length > packing_length:
                packs.append(pack)
                pack, used = [], 0
            pack.append((s, i))
            used += length
    if pack:
        packs.append(pack)
    return packs


def plan_steps(
    lengths: Sequence[Sequence[int]], *, batch_size: int, scheduling: Scheduling
) -> StepPlan:
    """Plan the steps of a job whose rendered samples have sequences of ``lengths`` tokens
    (one list per sample, in job order)."""
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    units = _units(lengths, scheduling.packing_length)
    chunks = [units[i : i + batch_size] for i in range(0, len(units), batch_size)]
    steps = [PlannedStep(tuple(tuple(u) for u in chunk), len(chunk)) for chunk in chunks]
    dropped_samples = 0
    if steps and steps[-1].share < batch_size:
        last = steps[-1]
        if scheduling.remainder == "drop" and len(steps) > 1:
            # A job smaller than one batch still trains its one partial step (P-SIZE-6): only a
            # shorter *last* step after full ones is dropped.
            steps.pop()
            kept = {s for step in steps for s, _ in step.sequences}
            dropped_samples = len({s for s, _ in last.sequences} - kept)
        elif scheduling.remainder == "pad":
            steps[-1] = PlannedStep(last.units, batch_size)
    return StepPlan(tuple(steps), dropped_samples)
