"""Reading the retrieval tables for the API and the console (always in the tenant's scope)."""

from __future__ import annotations

from uuid import UUID

from core.errors import NotFound
from core.models import Tenant
from core.pagination import KeysetPage, keyset_page
from core.tenancy import tenant_scope
from retrieval.models import Document, Invalidation, RetrievalSnapshot


def document_get(*, tenant: Tenant, document_id: str) -> Document:
    with tenant_scope(tenant.tenant_id):
        document = Document.objects.filter(tenant=tenant, document_id=document_id).first()
    if document is None:
        raise NotFound(f"no document {document_id[:80]!r} in this tenant", code="document_not_found")
    return document


def documents_page(*, tenant: Tenant, after: str | None, limit: int) -> KeysetPage[Document]:
    """One page of the tenant's documents by id: a list cut at a fixed size would hide the rest
    without a word that more exist."""
    with tenant_scope(tenant.tenant_id):
        return keyset_page(
            Document.objects.filter(tenant=tenant),
            keys=("document_id",),
            cursor=None if after is None else (after,),
            limit=limit,
            descending=False,
        )


def invalidations_page(*, tenant: Tenant, before: int | None, limit: int) -> KeysetPage[Invalidation]:
    """One page of what changed in the index, newest first."""
    with tenant_scope(tenant.tenant_id):
        return keyset_page(
            Invalidation.objects.filter(tenant=tenant),
            keys=("id",),
            cursor=None if before is None else (before,),
            limit=limit,
        )


def retrieval_snapshot_list(*, tenant_id: UUID, run_id: UUID, limit: int = 20) -> list[RetrievalSnapshot]:
    """A run's newest retrieval snapshots, read under the run's tenant (the table has RLS)."""
    with tenant_scope(tenant_id):
        return list(
            RetrievalSnapshot.objects.filter(tenant_id=tenant_id, run_id=run_id).order_by("-created_at")[
                :limit
            ]
        )
