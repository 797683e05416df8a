"""What a test asks of the artifact store: is a blob there (its record and its bytes), its bytes."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from core.artifacts import artifact_get, artifact_store, artifacts_stored


def blob_stored(tenant_id: UUID, ref: dict[str, Any] | str) -> bool:
    """Whether the tenant still has the blob: its record and the bytes in the store."""
    digest = ref if isinstance(ref, str) else str(ref["digest"])
    stored = artifacts_stored(tenant_id=tenant_id, digests=[digest]).get(digest)
    return stored is not None and artifact_store().exists(stored.key)


def blob_bytes(tenant_id: UUID, ref: dict[str, Any]) -> bytes:
    return artifact_get(tenant_id=tenant_id, ref=ref)


def tenant_keys(tenant_id: UUID) -> list[str]:
    """The objects under the tenant's prefix in the store."""
    return sorted(artifact_store().keys_under(f"{tenant_id}/"))
