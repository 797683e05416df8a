"""The one store interface behind every stored blob, and the backend settings.BACKENDS names.

A backend keeps bytes under keys Keeper chose (`<tenant>/<hh>/<hex>`); it never sees a path or a URI
taken from a run's data. Which backend holds a blob is written in its record, so a deployment that
moves to another store knows which blobs are still elsewhere.
"""

from __future__ import annotations

import re
import threading
from typing import Any
from uuid import UUID

from django.core.signals import setting_changed

from core.backends import backend_build

# The largest blob any part of Keeper stores or reads back (a workspace file is at most 16 MiB, a
# tool result at most what a request body may hold): every read is bounded by it and by the record.
MAX_ARTIFACT_BYTES = 64 * 1024 * 1024
# Keys Keeper makes: the tenant's id, then the digest's first two hex digits, then the digest. Blobs
# stored before keys carried the tenant have the last two parts only.
KEY = re.compile(
    r"(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/)?[0-9a-f]{2}/[0-9a-f]{64}"
)


def artifact_key(*, tenant_id: UUID, hexdigest: str) -> str:
    return f"{tenant_id}/{hexdigest[:2]}/{hexdigest}"


def key_check(key: str) -> str:
    """The key, if it is one Keeper makes; ValueError otherwise (a record is never trusted blindly)."""
    if not KEY.fullmatch(key):
        raise ValueError(f"not an artifact key: {key[:100]!r}")
    return key


class ArtifactStore:
    """Bytes by key. Backends raise core.artifacts.errors' classes: ArtifactMissing, ArtifactRefused,
    ArtifactTooLarge, ArtifactStoreUnavailable."""

    name = ""

    def write(self, key: str, data: bytes) -> None:
        """Store the bytes under the key, whole or not at all (a reader never sees half of them)."""
        raise NotImplementedError

    def read(self, key: str, *, limit: int) -> bytes:
        """The bytes under the key, refusing more than `limit` of them."""
        raise NotImplementedError

    def exists(self, key: str) -> bool:
        raise NotImplementedError

    def delete(self, key: str) -> bool:
        """Remove the blob; whether there was one."""
        raise NotImplementedError

    def keys_under(self, prefix: str, *, limit: int = 100_000) -> list[str]:
        """The keys under a tenant's prefix (`<tenant>/`), at most `limit`."""
        raise NotImplementedError

    def delete_under(self, prefix: str) -> int:
        """Remove every blob under a tenant's prefix; how many there were."""
        removed = 0
        while keys := self.keys_under(prefix, limit=1000):
            gone = sum(1 for key in keys if self.delete(key))
            removed += gone
            if not gone:  # nothing left that can go (listed, then gone meanwhile)
                break
        return removed


_built: dict[str, Any] = {}
_lock = threading.Lock()


def artifact_store() -> ArtifactStore:
    """This process's store, built once from settings.BACKENDS["artifact_store"] (again after a test
    changes the settings)."""
    with _lock:
        if "store" not in _built:
            _built["store"] = backend_build("artifact_store")
        store: ArtifactStore = _built["store"]
        return store


def _forget(*, setting: str, **_: Any) -> None:
    if setting in ("BACKENDS", "KEEPER_ARTIFACT_ROOT"):
        with _lock:
            _built.clear()


setting_changed.connect(_forget)
