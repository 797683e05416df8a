"""Retrieval snapshots read back: a snapshot by id or by run and query, its replay (the exact source
versions it recorded, never a new search), which of its sources changed since, and detaching a run's
snapshots."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from core.digests import sha256_digest
from core.errors import NotFound
from core.models import Tenant
from core.tenancy import tenant_scope
from retrieval.models import Chunk, RetrievalSnapshot
from retrieval.search import Hit


def snapshot_get(*, tenant: Tenant, snapshot_id: str) -> RetrievalSnapshot:
    with tenant_scope(tenant.tenant_id):
        snapshot = RetrievalSnapshot.objects.filter(tenant=tenant, snapshot_id=str(snapshot_id)[:100]).first()
    if snapshot is None:
        raise NotFound(
            f"no retrieval snapshot {str(snapshot_id)[:80]!r} in this tenant", code="snapshot_not_found"
        )
    return snapshot


def snapshot_find(*, tenant: Tenant, run_id: UUID, query: str, principal: str) -> RetrievalSnapshot | None:
    """The run's latest snapshot of this query for this principal, if it searched before."""
    with tenant_scope(tenant.tenant_id):
        return (
            RetrievalSnapshot.objects.filter(
                tenant=tenant,
                run_id=run_id,
                query_digest=sha256_digest(query),
                acl_principal=f"tenant:{tenant.tenant_id}/{principal}",
            )
            .order_by("-created_at")
            .first()
        )


def snapshot_replay(*, tenant: Tenant, snapshot: RetrievalSnapshot) -> list[Hit]:
    """The snapshot's hits with the text of exactly the recorded source version and digest, whether
    or not that version is still current. A chunk deleted since (its document was deleted) comes
    back with text None: a replay never substitutes a newer version or searches again."""
    with tenant_scope(tenant.tenant_id):
        keys = [(h["document_id"], h["source_version"], h["chunk_id"]) for h in snapshot.hits]
        rows = {}
        for document_id, version, chunk_id in keys:
            row = (
                Chunk.objects.filter(
                    tenant=tenant, document_id_text=document_id, source_version=version, chunk_id=chunk_id
                )
                .values_list("text", "content_digest")
                .first()
            )
            rows[(document_id, version, chunk_id)] = row
    hits = []
    for h, key in zip(snapshot.hits, keys, strict=True):
        row = rows[key]
        text = row[0] if row and row[1] == h["content_digest"] else None
        hits.append(Hit(**{**h, "text": text}))
    return hits


@dataclass(frozen=True)
class SourceChange:
    """A document a snapshot hit names that is gone or has another version now."""

    snapshot_id: str
    document_id: str
    recorded_version: str
    current_version: str | None  # None: the document was deleted

    def describe(self) -> str:
        now = "deleted" if self.current_version is None else f"now version {self.current_version}"
        return f"{self.document_id} (version {self.recorded_version} in {self.snapshot_id}) is {now}"


def snapshot_sources_changed(*, tenant_id: UUID, run_id: UUID) -> list[SourceChange]:
    """Every source behind the run's snapshots that was deleted or replaced by a newer version since
    it was retrieved (one entry per snapshot and document)."""
    from retrieval.models import Document

    with tenant_scope(tenant_id):
        snapshots = list(
            RetrievalSnapshot.objects.filter(tenant_id=tenant_id, run_id=run_id).order_by("created_at")
        )
        named = {h.get("document_id") for s in snapshots for h in s.hits or [] if isinstance(h, dict)}
        current = dict(
            Document.objects.filter(
                tenant_id=tenant_id, document_id__in=[d for d in named if isinstance(d, str)]
            ).values_list("document_id", "source_version")
        )
    changes = []
    for snapshot in snapshots:
        seen: set[str] = set()
        for hit in snapshot.hits or []:
            document_id, version = hit.get("document_id"), hit.get("source_version")
            if not isinstance(document_id, str) or document_id in seen:
                continue
            seen.add(document_id)
            now = current.get(document_id)
            if now != version:
                changes.append(SourceChange(snapshot.snapshot_id, document_id, str(version), now))
    return changes


def snapshots_detach(*, tenant_id: UUID, run_id: UUID, snapshot_ids: list[str]) -> int:
    """Detach these snapshots from the run (kept, by id, for the record): its next search of the same
    query finds no snapshot to replay and retrieves the current versions."""
    with tenant_scope(tenant_id):
        return RetrievalSnapshot.objects.filter(
            tenant_id=tenant_id, run_id=run_id, snapshot_id__in=snapshot_ids
        ).update(run_id=None)
