"""The content store: immutable blobs (logs, patches, eval scripts, snapshots) named by digest.

A key is ``sha256:<hex>`` of the blob's bytes, so the same content has the same key everywhere
and a stored blob can be checked against its name. Several processes may share one store
folder: objects are created whole (see :mod:`agent_ecc.durable`) and never change.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent_ecc.digests import canonical_json, digest_bytes
from agent_ecc.durable import create_exclusive

_PREFIX = "sha256:"


class StoreError(LookupError):
    """A key is malformed, names no stored blob, or names a blob whose content does not match."""


class ContentStore:
    """A content-addressed store in folder ``root`` (created when missing)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        (self.root / "objects").mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        if not key.startswith(_PREFIX) or len(key) != len(_PREFIX) + 64:
            raise StoreError(f"malformed store key {key!r}")
        hexdigest = key[len(_PREFIX) :]
        if any(c not in "0123456789abcdef" for c in hexdigest):
            raise StoreError(f"malformed store key {key!r}")
        return self.root / "objects" / hexdigest[:2] / hexdigest[2:]

    def put_bytes(self, data: bytes) -> str:
        """Store ``data``; return its key. Storing existing content changes nothing."""
        key = _PREFIX + digest_bytes(data)
        path = self._path(key)
        if not path.exists():
            create_exclusive(path, data)
        return key

    def get_bytes(self, key: str) -> bytes:
        """The blob named ``key``; :class:`StoreError` when missing or corrupt."""
        path = self._path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise StoreError(f"no blob {key} in store {self.root}") from None
        if _PREFIX + digest_bytes(data) != key:
            raise StoreError(f"blob {key} in store {self.root} does not match its key")
        return data

    def has(self, key: str) -> bool:
        """Whether the store holds ``key``."""
        return self._path(key).exists()


def put_text(store: ContentStore, text: str) -> str:
    """Store UTF-8 ``text``; return its key."""
    return store.put_bytes(text.encode())


def put_json(store: ContentStore, value: Any) -> str:
    """Store ``value`` as canonical JSON; return its key (equal values share one key)."""
    return store.put_bytes(canonical_json(value).encode())


def get_text(store: ContentStore, key: str) -> str:
    """The text blob named ``key``."""
    return store.get_bytes(key).decode()


def get_json(store: ContentStore, key: str) -> Any:
    """The JSON blob named ``key``, parsed."""
    return json.loads(store.get_bytes(key))
