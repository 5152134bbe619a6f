"""TTT-Discover's state reuse: the PUCT archive a runner picks each group's start state from,
as the published sampler does (``tinker_cookbook/recipes/ttt/sampler.py``, ``PUCTSampler``).

Each state is an attempt with its score. A state ``i`` is scored

```text
score(i) = Q(i) + c * scale * P(i) * sqrt(1 + T / G) / (1 + n(i) / G)
```

with ``Q(i)`` the best score any rollout started from it reached (``m(i)``) once it was
expanded, else its own score; ``P(i)`` a rank prior (the best of ``N`` states weighs ``N``,
the worst 1, normalised); ``scale`` the spread (max - min, at least 1e-6) of the scores of the
states that are not initial; ``n(i)`` how many expansions started from it or a descendant;
``T`` all expansions; ``G`` the group size (1, as the published code overrides it). A step's
groups take the best-scored states whose lineages (ancestors and descendants) do not overlap;
after the step each expanded state's ``m`` and its lineage's ``n`` grow, each parent keeps its
``topk_children`` best new children whose text is not in the archive yet, and the archive
keeps its initial states and its best ``max_size`` states.

Pure Python; the runner keeps it in memory (the published sampler saves it per step).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs


@attrs.frozen
class State:
    """An attempt in the archive.

    :ivar id: unique in the archive.
    :ivar text: the attempt (what a rollout starting from it improves).
    :ivar value: its score.
    :ivar ancestors: its parent's id, then the parent's ancestors.
    """

    id: str
    text: str
    value: float
    ancestors: tuple[str, ...] = ()


@attrs.frozen
class Child:
    """A rollout's attempt, started from ``parent``, with its score."""

    parent: State
    text: str
    value: float


class PUCTArchive:
    """The archive (see the module's documentation).

    :param initial: the initial states' texts and scores.
    :param c: the exploration constant (``puct_c``, 1 by default).
    :param topk_children: the new children each parent keeps (2; 0 keeps all).
    :param max_size: the most states kept (``max_buffer_size``).
    """

    def __init__(
        self,
        initial: Sequence[tuple[str, float]],
        *,
        c: float = 1.0,
        topk_children: int = 2,
        max_size: int = 1000,
    ) -> None:
        self.c = c
        self.group_size = 1
        self.topk_children = topk_children
        self.max_size = max_size
        self.states = [State(f"s{i}", text, value) for i, (text, value) in enumerate(initial)]
        self.initial = {s.id for s in self.states}
        self.visits: dict[str, int] = {}
        self.best_reached: dict[str, float] = {}
        self.expansions = 0
        self._next = len(self.states)

    def scores(self) -> list[tuple[float, State]]:
        """Each state's PUCT score, best first (ties: the better state first)."""
        values = [s.value for s in self.states]
        grown = [s.value for s in self.states if s.id not in self.initial] or values
        scale = max(max(grown) - min(grown), 1e-6)
        order = sorted(range(len(values)), key=lambda i: -values[i])
        ranks = {index: rank for rank, index in enumerate(order)}
        weights = [len(values) - ranks[i] for i in range(len(values))]
        total = sum(weights)
        size = self.group_size
        root = math.sqrt(1.0 + self.expansions / size)
        scored = []
        for i, state in enumerate(self.states):
            n = self.visits.get(state.id, 0)
            q = self.best_reached.get(state.id, state.value) if n > 0 else state.value
            bonus = self.c * scale * (weights[i] / total) * root / (1.0 + n / size)
            scored.append((q + bonus, state))
        scored.sort(key=lambda entry: (entry[0], entry[1].value), reverse=True)
        return scored

    def sample(self, count: int) -> list[State]:
        """The start states of a step's ``count`` groups: the best-scored, one per lineage
        when ``count > 1``; fewer when the archive has fewer separate lineages."""
        ranked = [state for _, state in self.scores()]
        if count <= 1:
            return ranked[:count]
        picked: list[State] = []
        blocked: set[str] = set()
        for state in ranked:
            if state.id in blocked:
                continue
            picked.append(state)
            blocked |= self._lineage(state)
            if len(picked) >= count:
                break
        return picked

    def _lineage(self, state: State) -> set[str]:
        """The state, its ancestors and every descendant."""
        lineage = {state.id, *state.ancestors}
        lineage |= {s.id for s in self.states if state.id in s.ancestors}
        return lineage

    def update(self, children: Sequence[Child]) -> None:
        """A step's rollouts: the statistics of their parents, then the children kept."""
        reached: dict[str, float] = {}
        parents: dict[str, State] = {}
        for child in children:
            parents[child.parent.id] = child.parent
            reached[child.parent.id] = max(reached.get(child.parent.id, -math.inf), child.value)
        for parent_id, value in reached.items():
            self.best_reached[parent_id] = max(self.best_reached.get(parent_id, value), value)
            for state_id in (parent_id, *parents[parent_id].ancestors):
                self.visits[state_id] = self.visits.get(state_id, 0) + 1
            self.expansions += 1
        kept: list[Child] = []
        for parent_id in reached:
            siblings = sorted(
                (c for c in children if c.parent.id == parent_id), key=lambda c: -c.value
            )
            kept += siblings[: self.topk_children] if self.topk_children else siblings
        texts = {s.text for s in self.states}
        for child in kept:
            if child.text in texts:
                continue
            texts.add(child.text)
            ancestors = (child.parent.id, *child.parent.ancestors)
            self.states.append(State(f"s{self._next}", child.text, child.value, ancestors))
            self._next += 1
        if len(self.states) > self.max_size:
            keep = {i for i, s in enumerate(self.states) if s.id in self.initial}
            for i in sorted(range(len(self.states)), key=lambda i: -self.states[i].value):
                if len(keep) >= self.max_size:
                    break
                keep.add(i)
            self.states = [self.states[i] for i in sorted(keep)]
