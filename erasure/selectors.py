"""Reads of erasure requests."""

from __future__ import annotations

from uuid import UUID

from core.models import Tenant
from core.tenancy import tenant_scope
from erasure.models import ErasureRequest


def erasure_request_list(
    *, tenant: Tenant, subject_digests: list[str] | None = None, limit: int = 200
) -> list[ErasureRequest]:
    """The tenant's erasure requests, newest first; one subject's when its digest is given."""
    with tenant_scope(tenant.tenant_id):
        requests = ErasureRequest.objects.filter(tenant=tenant)
        if subject_digests is not None:
            requests = requests.filter(subject_digest__in=subject_digests)
        return list(requests.order_by("-created_at")[:limit])


def erasure_request_get(*, tenant: Tenant, request_id: UUID) -> ErasureRequest | None:
    """The request if it belongs to this tenant (row-level security hides any other)."""
    with tenant_scope(tenant.tenant_id):
        return ErasureRequest.objects.filter(tenant=tenant, request_id=request_id).first()
