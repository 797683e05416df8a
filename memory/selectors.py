"""Reading long-term memory: only current, unexpired claims of this tenant, subject and namespace."""

from __future__ import annotations

from typing import TypedDict
from uuid import UUID

from django.db.models import Count, Q
from django.utils import timezone

from core.models import Tenant
from core.tenancy import tenant_scope
from memory.models import ErasureRequest, MemoryItem, MemoryVector, Tombstone


def memory_recall(
    *,
    tenant: Tenant,
    subject_id: str,
    namespaces: list[str] | None = None,
    schema_versions: tuple[int, ...] = (1,),
) -> list[MemoryItem]:
    """The newest valid claim per key. Row-level security already confines the rows to the tenant;
    the filters here say which of the tenant's claims are still true."""
    now = timezone.now()
    with tenant_scope(tenant.tenant_id):
        items = MemoryItem.objects.filter(
            Q(expires_at__isnull=True) | Q(expires_at__gt=now),
            subject_id=subject_id,
            invalidated_at__isnull=True,
            valid_from__lte=now,
            schema_version__in=schema_versions,
        )
        if namespaces is not None:
            items = items.filter(namespace__in=namespaces)
        return list(items.order_by("namespace", "key"))


# --- everything kept about one subject, for compliance (current or not) -------------------------


def memory_subject_items(*, tenant: Tenant, subject_id: str) -> list[MemoryItem]:
    """Every claim about the subject: current, superseded, invalidated and expired; newest first."""
    with tenant_scope(tenant.tenant_id):
        return list(
            MemoryItem.objects.filter(subject_id=subject_id)
            .annotate(vector_count=Count("vectors"))
            .order_by("-created_at", "-valid_from")
        )


class VectorCount(TypedDict):
    """Vector rows of one embedder key (and its dimensions)."""

    embedder_key: str
    dimensions: int
    count: int


def memory_subject_vector_counts(*, tenant: Tenant, subject_id: str) -> list[VectorCount]:
    """The subject's vector rows per embedder key (counts only; the vectors stay in the database)."""
    with tenant_scope(tenant.tenant_id):
        return list(
            MemoryVector.objects.filter(memory__subject_id=subject_id)
            .values("embedder_key", "dimensions")
            .annotate(count=Count("id"))
            .order_by("embedder_key")
        )


def memory_tombstone_count(*, tenant: Tenant, subject_digest: str) -> int:
    with tenant_scope(tenant.tenant_id):
        return Tombstone.objects.filter(subject_digest=subject_digest).count()


def erasure_request_list(
    *, tenant: Tenant, subject_digest: str | None = None, limit: int = 200
) -> list[ErasureRequest]:
    """The tenant's erasure requests, newest first; one subject's when its digest is given."""
    with tenant_scope(tenant.tenant_id):
        requests = ErasureRequest.objects.filter(tenant=tenant)
        if subject_digest is not None:
            requests = requests.filter(subject_digest=subject_digest)
        return list(requests.order_by("-created_at")[:limit])


def erasure_request_get(*, tenant: Tenant, request_id: UUID) -> ErasureRequest | None:
    """The request if it belongs to this tenant (row-level security hides any other)."""
    with tenant_scope(tenant.tenant_id):
        return ErasureRequest.objects.filter(tenant=tenant, request_id=request_id).first()
