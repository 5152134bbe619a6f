"""The untrained samples a pipeline has read, and the buffer computed from them (P-BUF-*).

:class:`UntrainedSamples` holds a trainer's readable untrained samples in store order and
answers the buffer's steps 2-4: one kind (the first counting sample's), stale samples left out
with their groups, the first ``limit`` samples and the rest of the groups they touch.

Staleness is the record-to-sample stage's verdict (``is_stale``). Samples that will never train
pile up untrained, so verdicts are cached: a sample is judged when it is read, and every sample
is judged again only when the stage's inputs to staleness change (the pipeline calls
:meth:`UntrainedSamples.rejudge` when a new artifact is served or the context changes). The
samples held out (stale ones and the fresh members of their groups) are kept apart from the
candidates, so computing the buffer costs the same with 100,000 stale samples as with none.
What changes in the stale set is kept as a delta (:meth:`UntrainedSamples.take_stale_changes`),
which the pipeline writes to the store's stale marks (``reef_stale_samples``) without comparing
whole sets.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence

import attrs

from reef.core.job_data import Sample
from reef.storage.positions import Position

__all__ = ["Entry", "StaleChanges", "UntrainedSamples"]


@attrs.frozen
class Entry:
    """One untrained sample as the pipeline reads it: where it is, where it came from."""

    position: Position
    origin: str
    sample: Sample

    @property
    def sample_id(self) -> str:
        return str(self.sample.sample_id)


@attrs.frozen
class StaleChanges:
    """What changed in the stale set since the last :meth:`UntrainedSamples.take_stale_changes`.

    :ivar whole: the whole stale set, when nothing was taken before (the first write of a
        pipeline replaces every mark its trainer had); ``None`` afterwards.
    :ivar added: samples that became stale.
    :ivar removed: samples that are no longer stale (fresh again, trained or gone).
    """

    whole: frozenset[str] | None
    added: frozenset[str]
    removed: frozenset[str]

    def __bool__(self) -> bool:
        return self.whole is not None or bool(self.added or self.removed)


class UntrainedSamples:
    """A trainer's readable untrained samples with cached staleness verdicts.

    :param is_stale: the stage's verdict on a sample made from records.
    :param counts: whether a sample counts toward a buffer at all, whatever its kind (eval
        tasks never do; imported tasks only for a stage that accepts them).
    """

    def __init__(self, is_stale: Callable[[Sample], bool], counts: Callable[[Entry], bool]) -> None:
        self._is_stale = is_stale
        self._counts = counts
        self._first_held_cache: dict[str, Entry] | None = None
        self._entries: dict[str, Entry] = {}  # every readable untrained sample, store order
        self._fresh: dict[str, Entry] = {}  # candidates: not stale, no stale group mate
        self._held: dict[str, Entry] = {}  # stale, or in the group of a stale sample
        self._stale: set[str] = set()
        self._stale_groups: set[str] = set()
        self._groups: dict[str, list[str]] = {}  # group id -> its members' ids
        self._added: set[str] = set()
        self._removed: set[str] = set()
        self._taken = False

    # -- the samples ------------------------------------------------------------------------

    def __contains__(self, sample_id: object) -> bool:
        return sample_id in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, sample_id: str) -> Entry | None:
        """The entry of an untrained sample, ``None`` for one not held here."""
        return self._entries.get(sample_id)

    def entries(self) -> Iterator[Entry]:
        """Every entry, in store order."""
        return iter(self._entries.values())

    def add(self, entry: Entry) -> None:
        """A sample read from the store (after every sample already held, in store order)."""
        sample_id = entry.sample_id
        self._entries[sample_id] = entry
        group = entry.sample.group_id
        if group is not None:
            self._groups.setdefault(group, []).append(sample_id)
        self._judge(entry)

    def remove(self, sample_ids: Iterable[str]) -> None:
        """Forget samples (trained, or an upload that left the scenario)."""
        for sample_id in sample_ids:
            entry = self._entries.pop(sample_id, None)
            if entry is None:
                continue
            self._fresh.pop(sample_id, None)
            if self._held.pop(sample_id, None) is not None:
                self._first_held_cache = None
            group = entry.sample.group_id
            if group is not None:
                members = self._groups[group]
                members.remove(sample_id)
                if not members:
                    del self._groups[group]
            if sample_id in self._stale:
                self._unmark(sample_id)
                if group is not None and group in self._groups:
                    # The group's other stale members (if any) keep it out; judge it again.
                    self._stale_groups.discard(group)
                    for mate in self._groups[group]:
                        self._held.pop(mate, None)
                        self._first_held_cache = None
                        if mate in self._stale:
                            self._unmark(mate)
                    for mate in self._groups[group]:
                        self._judge(self._entries[mate])
                    # Mates judged fresh again joined the candidates last: put them back in
                    # store order (rare: a stale sample is trained only when it turned stale
                    # while reserved).
                    self._fresh = dict(sorted(self._fresh.items(), key=lambda i: i[1].position))

    def rejudge(self) -> None:
        """Judge every sample again: the stage's inputs to staleness changed."""
        was = set(self._stale)
        self._fresh, self._held, self._first_held_cache = {}, {}, None
        self._stale, self._stale_groups = set(), set()
        for entry in self._entries.values():
            self._judge(entry)
        now = self._stale
        self._added = (self._added - (was - now)) | (now - was)
        self._removed = (self._removed - (now - was)) | (was - now)

    def _judge(self, entry: Entry) -> None:
        sample_id, group = entry.sample_id, entry.sample.group_id
        if entry.origin == "record" and self._is_stale(entry.sample):
            self._mark(sample_id)
            self._hold(entry)
            if group is not None and group not in self._stale_groups:
                self._stale_groups.add(group)
                for mate in self._groups.get(group, ()):
                    moved = self._fresh.pop(mate, None)
                    if moved is not None:
                        self._hold(moved)
            return
        if group is not None and group in self._stale_groups:
            self._hold(entry)
        else:
            self._fresh[sample_id] = entry

    def _hold(self, entry: Entry) -> None:
        self._held[entry.sample_id] = entry
        first = self._first_held_cache
        if first is not None and self._counts(entry):
            known = first.get(entry.sample.kind)
            if known is None or entry.position < known.position:
                first[entry.sample.kind] = entry

    def _mark(self, sample_id: str) -> None:
        self._stale.add(sample_id)
        if sample_id in self._removed:
            self._removed.discard(sample_id)
        else:
            self._added.add(sample_id)

    def _unmark(self, sample_id: str) -> None:
        self._stale.discard(sample_id)
        if sample_id in self._added:
            self._added.discard(sample_id)
        else:
            self._removed.add(sample_id)

    # -- what is held out -------------------------------------------------------------------

    def stale_ids(self) -> frozenset[str]:
        """The samples held out as stale (P-BUF-4), as judged now."""
        return frozenset(self._stale)

    @property
    def stale_count(self) -> int:
        return len(self._stale)

    @property
    def held_with_stale_group(self) -> int:
        """Fresh samples held out because a member of their group is stale."""
        return len(self._held) - len(self._stale)

    def is_held(self, sample_id: str) -> bool:
        return sample_id in self._held

    def take_stale_changes(self) -> StaleChanges:
        """What changed in the stale set since the last call (the whole set at the first)."""
        if not self._taken:
            self._taken = True
            self._added, self._removed = set(), set()
            return StaleChanges(frozenset(self._stale), frozenset(), frozenset())
        changes = StaleChanges(None, frozenset(self._added), frozenset(self._removed))
        self._added, self._removed = set(), set()
        return changes

    # -- the buffer -------------------------------------------------------------------------

    def group_mates(self, groups: Collection[str]) -> list[Entry]:
        """Every entry of ``groups``."""
        return [self._entries[sid] for group in groups for sid in self._groups.get(group, ())]

    def auto_buffer(
        self, kinds: Collection[str] | None, *, handed_out: Collection[str], limit: int | None
    ) -> list[Entry]:
        """Steps 2-4 of the buffer over the entries not handed out that count: of ``kinds``
        (``None``: any kind) and passing the pipeline's ``counts``. The buffer's kind is that
        of the first counting entry, held out or not (step 2)."""

        def counting(entry: Entry) -> bool:
            return kinds is None or entry.sample.kind in kinds

        candidates = (
            e
            for e in self._fresh.values()
            if e.sample_id not in handed_out and counting(e) and self._counts(e)
        )
        first = next(candidates, None)
        if first is None or (limit is not None and limit <= 0):
            return []
        kind = first.sample.kind
        held = [
            self._first_held_of(k, handed_out) if e.sample_id in handed_out else e
            for k, e in self._first_held().items()
            if kinds is None or k in kinds
        ]
        earliest = min((e for e in held if e is not None), key=lambda e: e.position, default=None)
        if earliest is not None and earliest.position < first.position:
            kind = earliest.sample.kind
        fresh = (e for e in itertools.chain((first,), candidates) if e.sample.kind == kind)
        chosen: list[Entry] = []
        for entry in fresh:
            chosen.append(entry)
            if limit is not None and len(chosen) >= limit:
                break
        if limit is None or len(chosen) < limit:
            return chosen
        # Step 4: the first `limit` samples and the rest of each group they touch.
        touched = {e.sample.group_id for e in chosen if e.sample.group_id is not None}
        return chosen + [e for e in fresh if e.sample.group_id in touched]

    def _first_held(self) -> dict[str, Entry]:
        """The first held-out entry in store order of each kind that counts, kept until the
        held set loses an entry (then found again). The held set is not in store order: a
        group's earlier members join it when a later member turns stale."""
        if self._first_held_cache is None:
            first: dict[str, Entry] = {}
            for entry in self._held.values():
                known = first.get(entry.sample.kind)
                if (known is None or entry.position < known.position) and self._counts(entry):
                    first[entry.sample.kind] = entry
            self._first_held_cache = first
        return self._first_held_cache

    def _first_held_of(self, kind: str, handed_out: Collection[str]) -> Entry | None:
        """The first held-out entry of ``kind`` that counts and is not handed out: a reserved
        sample that turned stale is out of step 1 (rare, so found by a scan)."""
        return min(
            (
                e
                for e in self._held.values()
                if e.sample.kind == kind and e.sample_id not in handed_out and self._counts(e)
            ),
            key=lambda e: e.position,
            default=None,
        )

    def buffer_of(self, entries: Sequence[Entry]) -> list[Entry]:
        """Steps 2-3 of the buffer over ``entries`` (in store order, every kind counting):
        the first counting entry's kind, held-out samples left out (the manual buffer)."""
        counting = [e for e in entries if self._counts(e)]
        if not counting:
            return []
        kind = counting[0].sample.kind
        return [e for e in counting if e.sample.kind == kind and e.sample_id not in self._held]
