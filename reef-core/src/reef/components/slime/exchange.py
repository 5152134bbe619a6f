"""The folder through which Reef's trainer and slime's data source hand each other jobs and
progress: the only thing the two processes share.

Reef's side (:class:`reef.components.slime.component.SlimeComponent`) writes; slime's side
(:class:`reef.components.slime.data_source.ReefDataSource`) reads jobs and writes progress::

    <exchange>/jobs/<seq>.json         one job's groups, rendered (Reef writes, once per job id)
    <exchange>/job_ids/<sha256>.json   a job id's seq, so a job resubmitted is not written twice
    <exchange>/handouts.jsonl          each group slime's data source handed out, by rollout
    <exchange>/saves.jsonl             each rollout slime saved: the groups its weights trained
    <exchange>/incarnations.jsonl      each start of the data source: the rollout it resumed at

A group is named ``(seq, index)``: the job's sequence number and the group's place in the job.
Files are written whole and renamed into place; the ``.jsonl`` logs are appended line by line
and synced, and a torn last line (a crash while appending) is ignored when read.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from reef.components.json_files import read_json, write_json
from reef.core.records import JSON

#: A group of a job: (the job's seq, the group's index in the job).
GroupKey = tuple[int, int]

_SEQ_DIGITS: Final = 10


@attrs.define
class TrainedGroups:
    """A set of groups, kept small: every group of the jobs before ``below`` (a prefix of job
    seqs), plus the listed ones. Groups are handed out in job order, so the set is mostly a
    prefix, and :meth:`compact` folds complete jobs into it."""

    below: int = 0
    groups: set[GroupKey] = attrs.field(factory=set)

    def __contains__(self, key: GroupKey) -> bool:
        return key[0] < self.below or key in self.groups

    def add(self, keys: Iterable[GroupKey]) -> None:
        """Add groups (those already in the prefix change nothing)."""
        self.groups.update(k for k in keys if k[0] >= self.below)

    def discard(self, keys: Iterable[GroupKey]) -> None:
        """Remove listed groups (never the prefix: a returned group was handed out, not trained)."""
        self.groups.difference_update(keys)

    def compact(self, group_counts: Mapping[int, int]) -> None:
        """Fold each complete job at the prefix's end into it (``group_counts``: groups per seq)."""
        while self.below in group_counts and all(
            (self.below, i) in self.groups for i in range(group_counts[self.below])
        ):
            self.groups.difference_update((self.below, i) for i in range(group_counts[self.below]))
            self.below += 1

    def copy(self) -> TrainedGroups:
        """An independent copy."""
        return TrainedGroups(self.below, set(self.groups))

    def to_json(self) -> JSON:
        return {"below": self.below, "groups": sorted([list(k) for k in self.groups])}

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> TrainedGroups:
        return cls(int(body["below"]), {(int(s), int(i)) for s, i in body["groups"]})


class Exchange:
    """The exchange folder (see the module's documentation).

    :param root: the folder; made when missing.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "jobs").mkdir(parents=True, exist_ok=True)
        (root / "job_ids").mkdir(parents=True, exist_ok=True)
        self._group_counts: dict[int, int] = {}

    # -- jobs (Reef writes) ----------------------------------------------------------------

    def _job_path(self, seq: int) -> Path:
        return self.root / "jobs" / f"{seq:0{_SEQ_DIGITS}d}.json"

    def _id_path(self, job_id: str) -> Path:
        return self.root / "job_ids" / f"{hashlib.sha256(job_id.encode()).hexdigest()}.json"

    def seq_of(self, job_id: str) -> int | None:
        """The seq of job ``job_id``, if it was written."""
        body = read_json(self._id_path(job_id))
        return None if body is None else int(body["seq"])

    def add_job(self, job_id: str, body: JSON) -> int:
        """Write a job (``body`` holds its ``groups``) as the next seq, once per job id, and
        return its seq. The trainer writes one job at a time, so seqs never collide."""
        known = self.seq_of(job_id)
        if known is not None:
            return known
        seq = len(list((self.root / "jobs").glob("*.json")))
        write_json(self._job_path(seq), {**body, "job_id": job_id, "seq": seq})
        # Its id last: a job whose id is recorded is whole.
        write_json(self._id_path(job_id), {"seq": seq})
        return seq

    def job(self, seq: int) -> JSON | None:
        """The job of ``seq``, or ``None`` before Reef wrote it."""
        body = read_json(self._job_path(seq))
        if body is not None:
            self._group_counts[seq] = len(body["groups"])
        return body  # type: ignore[no-any-return]

    def group_counts(self, up_to: int) -> Mapping[int, int]:
        """Groups per job, for the jobs before ``up_to`` that Reef wrote."""
        for seq in range(up_to):
            if seq not in self._group_counts:
                self.job(seq)
        return self._group_counts

    # -- progress (slime's data source writes) ---------------------------------------------

    def append(self, log: str, line: JSON) -> None:
        """Append ``line`` to ``<log>.jsonl`` and sync it."""
        with open(self.root / f"{log}.jsonl", "a", encoding="utf-8") as handle:
            handle.write(json.dumps(line, sort_keys=True) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def lines(self, log: str) -> Iterator[JSON]:
        """The lines of ``<log>.jsonl`` in order; a torn last line is left out."""
        try:
            text = (self.root / f"{log}.jsonl").read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        for line in text.splitlines():
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue  # the end of a line whose append a crash cut short

    def last_save(self) -> JSON | None:
        """The save slime's data source recorded last, or ``None`` before any."""
        last = None
        for line in self.lines("saves"):
            last = line
        return last
