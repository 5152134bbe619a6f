"""The content store: immutable blobs (logs, patches, eval scripts, snapshots) named by digest.

A key is ``sha256:<hex>`` of the blob's bytes, so the same content has the same key everywhere
and a stored blob can be checked against its name. Several processes may share one store
folder: objects are created whole (see :mod:`agent_ecc.durable`) and never change.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from agent_ecc.digests import canonical_json, digest_bytes
from agent_ecc.durable import create_exclusive

_PREFIX = "sha256:"
_BLANK_MAX = 4096  # a longer blob of whitespace only is no patch anyone sends
_PROBE = 64  # the bytes a blank probe reads first
_KEY = re.compile(r"sha256:[0-9a-f]{64}")


class StoreError(LookupError):
    """A key is malformed, names no stored blob, or names a blob whose content does not match."""


class ContentStore:
    """A content-addressed store in folder ``root`` (created when missing)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        (self.root / "objects").mkdir(parents=True, exist_ok=True)
        self._objects = str(self.root / "objects")

    def _path(self, key: str) -> str:
        # On every read of a seal's hot path: a regex and string joins, not pathlib.
        if not isinstance(key, str) or _KEY.fullmatch(key) is None:
            raise StoreError(f"malformed store key {key!r}")
        return f"{self._objects}{os.sep}{key[7:9]}{os.sep}{key[9:]}"

    def put_bytes(self, data: bytes) -> str:
        """Store ``data``; return its key. Storing existing content changes nothing."""
        key = _PREFIX + digest_bytes(data)
        path = self._path(key)
        if not os.path.exists(path):
            create_exclusive(Path(path), data)
        return key

    def get_bytes(self, key: str) -> bytes:
        """The blob named ``key``; :class:`StoreError` when missing or corrupt."""
        path = self._path(key)
        try:
            with open(path, "rb") as handle:
                data = handle.read()
        except FileNotFoundError:
            raise StoreError(f"no blob {key} in store {self.root}") from None
        if _PREFIX + digest_bytes(data) != key:
            raise StoreError(f"blob {key} in store {self.root} does not match its key")
        return data

    def head(self, key: str, count: int) -> bytes:
        """The first ``count`` bytes of the blob named ``key``, *not* checked against its key:
        for a probe that decides nothing from them alone (read the blob with
        :meth:`get_bytes` before any verdict rests on its content). :class:`StoreError` when
        missing."""
        try:
            with open(self._path(key), "rb") as handle:
                return handle.read(count)
        except FileNotFoundError:
            raise StoreError(f"no blob {key} in store {self.root}") from None

    def size(self, key: str) -> int:
        """The size in bytes of the blob named ``key``; :class:`StoreError` when missing."""
        try:
            return os.stat(self._path(key)).st_size
        except FileNotFoundError:
            raise StoreError(f"no blob {key} in store {self.root}") from None

    def has(self, key: str) -> bool:
        """Whether the store holds ``key``."""
        return os.path.exists(self._path(key))


def put_text(store: ContentStore, text: str) -> str:
    """Store UTF-8 ``text``; return its key."""
    return store.put_bytes(text.encode())


def put_json(store: ContentStore, value: Any) -> str:
    """Store ``value`` as canonical JSON; return its key (equal values share one key)."""
    return store.put_bytes(canonical_json(value).encode())


def get_text(store: ContentStore, key: str) -> str:
    """The text blob named ``key``."""
    return store.get_bytes(key).decode()


def is_blank(store: ContentStore, key: str) -> bool:
    """Whether the blob is empty or only whitespace (an empty patch).

    A real patch shows it is not blank in its first bytes, so those are all that is read of
    it, unchecked: a "no" decides no verdict (the next way to grade is tried). Only a blob that
    may be blank (its first bytes whitespace, at most :data:`_BLANK_MAX` bytes long) is read
    whole and checked against its key, since an empty patch fails its member."""
    if store.head(key, _PROBE).strip():
        return False
    return store.size(key) <= _BLANK_MAX and not store.get_bytes(key).strip()


def get_json(store: ContentStore, key: str) -> Any:
    """The JSON blob named ``key``, parsed."""
    return json.loads(store.get_bytes(key))
