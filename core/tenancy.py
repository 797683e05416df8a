"""The tenant of the current transaction, as PostgreSQL sees it (row-level security reads it)."""

from __future__ import annotations

from uuid import UUID

from django.db import connection

from core.errors import NotFound
from core.models import Tenant

TENANT_SETTING = "keeper.tenant_id"


def tenant_get(*, slug_or_id: str | UUID) -> Tenant:
    try:
        if isinstance(slug_or_id, UUID):
            return Tenant.objects.get(tenant_id=slug_or_id)
        try:
            return Tenant.objects.get(tenant_id=UUID(slug_or_id))
        except ValueError:
            return Tenant.objects.get(slug=slug_or_id)
    except Tenant.DoesNotExist:
        raise NotFound(f"no tenant {slug_or_id!s}", code="unknown_tenant") from None


def tenant_ensure(*, slug: str, name: str = "") -> Tenant:
    tenant, _ = Tenant.objects.get_or_create(slug=slug, defaults={"name": name or slug})
    return tenant


def tenant_set_for_transaction(tenant_id: UUID) -> None:
    """Bind the tenant to the current transaction only (SET LOCAL semantics)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT set_config(%s, %s, true)", [TENANT_SETTING, str(tenant_id)])
