"""Blobs stored before Keeper kept records of them, adopted by the digests each tenant's rows name.

Such a reference held a path (`file://<root>/<hh>/<hex>`), and one file served every tenant with the
same bytes. Adoption takes no path from the rows: for each digest a tenant's rows name (the registered
reference kinds), it looks for `<hh>/<hex>` under the old root, opened like any local blob (a regular
file inside that root, no link followed), and keeps it only if its bytes match the digest. Into a
local store at that same root the record names the old file where it is (several tenants' records may
name it; it goes with the last of them); into any other store the bytes are copied under the tenant's
own key. Run by a migration for the configured root, and by `manage.py artifacts_adopt`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from uuid import UUID

from django.db import connection

from core.artifacts.errors import ArtifactMissing, ArtifactRefused, ArtifactTooLarge
from core.artifacts.local import LocalArtifactStore
from core.artifacts.references import artifacts_referenced_all
from core.artifacts.services import artifacts_stored, blobs_store
from core.artifacts.store import MAX_ARTIFACT_BYTES, ArtifactStore, artifact_store
from core.models import Tenant
from core.tenancy import tenant_scope


def _record_in_place(tenant_id: UUID, digest: str, key: str, size: int) -> None:
    with tenant_scope(tenant_id), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO stored_artifacts (tenant_id, digest, store, key, size, created_at, touched_at) "
            "VALUES (%s, %s, 'local', %s, %s, now(), now()) ON CONFLICT (tenant_id, digest) DO NOTHING",
            [tenant_id, digest, key, size],
        )


def artifacts_adopt_legacy(*, root: Path, store: ArtifactStore | None = None) -> dict[str, int]:
    """Record (or copy into the store) every old blob under `root` a tenant's rows name; counts of
    what was adopted in place, copied, and not adopted (missing, not matching, refused)."""
    store = store or artifact_store()
    counts = {"adopted": 0, "copied": 0, "missing": 0, "mismatched": 0, "refused": 0}
    if not root.is_dir():
        return counts
    old = LocalArtifactStore(root=str(root))
    in_place = isinstance(store, LocalArtifactStore) and store.root.resolve() == root.resolve()
    for tenant_id in Tenant.objects.order_by("slug").values_list("tenant_id", flat=True):
        named = artifacts_referenced_all(tenant_id=tenant_id)
        known = artifacts_stored(tenant_id=tenant_id, digests=sorted(named))
        for digest in sorted(named - set(known)):
            hexdigest = digest.removeprefix("sha256:")
            key = f"{hexdigest[:2]}/{hexdigest}"
            try:
                data = old.read(key, limit=MAX_ARTIFACT_BYTES)
            except ArtifactMissing:
                counts["missing"] += 1
                continue
            except (ArtifactRefused, ArtifactTooLarge):
                counts["refused"] += 1
                continue
            if hashlib.sha256(data).hexdigest() != hexdigest:
                counts["mismatched"] += 1
            elif in_place:
                _record_in_place(tenant_id, digest, key, len(data))
                counts["adopted"] += 1
            else:
                blobs_store(tenant_id=tenant_id, blobs=[data], store=store)
                counts["copied"] += 1
    return counts
