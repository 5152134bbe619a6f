"""The seal journal: durable, crash-safe, one committed decision per batch (contract section 7).

Each decision is appended as a ``decision`` line, fsynced, then a ``commit`` line, fsynced; only
committed decisions count. A torn last line is ignored on read and cut off before the next
append. The journal refuses a decision whose epoch is older than the last committed one (I3,
E-SEAL-5) and a second decision for a committed batch (I5).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path
from typing import Any

from agent_ecc.codec import from_json, to_json
from agent_ecc.seal import Decision


class JournalError(RuntimeError):
    """The journal refuses a decision (I3 or I5)."""


def _parse(data: bytes) -> tuple[list[dict[str, Any]], int]:
    """The whole lines of ``data`` and the byte length they span (a torn tail excluded)."""
    entries = []
    end = 0
    for line in data.split(b"\n")[:-1]:  # the piece after the last newline is torn or empty
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            break
        end += len(line) + 1
    return entries, end


def committed(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The decision bodies of ``entries`` whose commit line follows them, in commit order."""
    pending: dict[str, dict[str, Any]] = {}
    out = []
    for entry in entries:
        if entry.get("kind") == "decision":
            pending[entry["batch_id"]] = entry["decision"]
        elif entry.get("kind") == "commit" and entry["batch_id"] in pending:
            out.append(pending.pop(entry["batch_id"]))
    return out


class SealJournal:
    """A journal at ``path`` (created when missing); one writer at a time holds its lock."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)

    def _write(self, fd: int, entry: dict[str, Any]) -> None:
        os.write(fd, (json.dumps(entry, sort_keys=True, separators=(",", ":")) + "\n").encode())
        os.fsync(fd)

    def append(self, decision: Decision) -> None:
        """Append ``decision`` and commit it; refuses I3 and I5 violations (nothing written)."""
        fd = os.open(self.path, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            data = self.path.read_bytes()
            entries, end = _parse(data)
            if end != len(data):
                os.ftruncate(fd, end)  # a torn tail from a crash: never half a line before ours
                os.fsync(fd)
            done = committed(entries)
            if any(d["given"]["batch_id"] == decision.batch_id for d in done):
                raise JournalError(
                    f"batch {decision.batch_id} already has a committed decision (I5)"
                )
            if done:
                last = max(d["epoch"]["index"] for d in done)
                if decision.epoch.index < last:
                    raise JournalError(
                        f"batch {decision.batch_id}: epoch {decision.epoch.index} is older than "
                        f"the last committed epoch {last} (I3)"
                    )
            os.lseek(fd, 0, os.SEEK_END)
            self._write(
                fd,
                {"kind": "decision", "batch_id": decision.batch_id, "decision": to_json(decision)},
            )
            self._write(
                fd, {"kind": "commit", "batch_id": decision.batch_id, "epoch": decision.epoch.index}
            )
        finally:
            os.close(fd)

    def read(self) -> list[Decision]:
        """The committed decisions, in commit order."""
        entries, _ = _parse(self.path.read_bytes())
        return [from_json(Decision, body) for body in committed(entries)]

    def entries(self) -> list[dict[str, Any]]:
        """Every whole line (for audits of what the file holds)."""
        return _parse(self.path.read_bytes())[0]
