"""The tenant of the current transaction, as PostgreSQL sees it (row-level security reads it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID

from django.db import connection, transaction

from core.errors import NotFound
from core.models import Tenant

TENANT_SETTING = "app.tenant_id"


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


@contextmanager
def tenant_scope(tenant_id: UUID) -> Iterator[None]:
    """A transaction in which PostgreSQL's row-level security shows only this tenant's rows.

    The one way the application sets the tenant (SET LOCAL semantics: it ends with the
    transaction). Nested scopes must name the same tenant.
    """
    if not isinstance(tenant_id, UUID):
        raise TypeError("tenant_scope takes the tenant's UUID")
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting(%s, true)", [TENANT_SETTING])
            previous = cursor.fetchone()[0] or ""
            if previous and previous != str(tenant_id):
                raise RuntimeError(f"already inside tenant {previous}; one transaction serves one tenant")
            cursor.execute("SELECT set_config(%s, %s, true)", [TENANT_SETTING, str(tenant_id)])
        yield
        # Inside an outer transaction SET LOCAL would outlive this block: put the previous value
        # back. (On an exception the block's rollback reverts the setting by itself.)
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config(%s, %s, true)", [TENANT_SETTING, previous])
