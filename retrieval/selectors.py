"""Reading the retrieval tables for the API and the console (always in the tenant's scope)."""

from __future__ import annotations

from uuid import UUID

from core.errors import NotFound
from core.models import Tenant
from core.tenancy import tenant_scope
from retrieval.models import Document, Invalidation, RetrievalSnapshot


def document_get(*, tenant: Tenant, document_id: str) -> Document:
    with tenant_scope(tenant.tenant_id):
        document = Document.objects.filter(document_id=document_id).first()
    if document is None:
        raise NotFound(f"no document {document_id[:80]!r} in this tenant", code="document_not_found")
    return document


def documents_list(*, tenant: Tenant, limit: int = 500) -> list[Document]:
    with tenant_scope(tenant.tenant_id):
        return list(Document.objects.order_by("document_id")[:limit])


def invalidations_list(*, tenant: Tenant, limit: int = 200) -> list[Invalidation]:
    with tenant_scope(tenant.tenant_id):
        return list(Invalidation.objects.order_by("-id")[:limit])


def retrieval_snapshot_list(*, tenant_id: UUID, run_id: UUID, limit: int = 20) -> list[RetrievalSnapshot]:
    """A run's newest retrieval snapshots, read under the run's tenant (the table has RLS)."""
    with tenant_scope(tenant_id):
        return list(RetrievalSnapshot.objects.filter(run_id=run_id).order_by("-created_at")[:limit])
