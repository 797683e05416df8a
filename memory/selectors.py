"""Reading long-term memory: only current, unexpired claims of this tenant, subject and namespace."""

from __future__ import annotations

from django.db.models import Q
from django.utils import timezone

from core.models import Tenant
from core.tenancy import tenant_scope
from memory.models import MemoryItem


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
            subject_id=subject_id, invalidated_at__isnull=True, valid_from__lte=now,
            schema_version__in=schema_versions,
        )  # fmt: skip
        if namespaces is not None:
            items = items.filter(namespace__in=namespaces)
        return list(items.order_by("namespace", "key"))
