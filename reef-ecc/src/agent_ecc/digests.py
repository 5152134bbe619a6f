"""Canonical JSON and the SHA-256 digests that every identity of agent-ecc is made of.

Identities (execution, request, grading) must be equal in every process and after a restart,
so they hash one canonical JSON form: sorted keys, no spaces, UTF-8.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON (sorted keys, compact separators, non-ASCII kept)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value: Any) -> str:
    """The SHA-256 hex digest of ``value``'s canonical JSON."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def digest_bytes(data: bytes) -> str:
    """The SHA-256 hex digest of raw bytes."""
    return hashlib.sha256(data).hexdigest()
