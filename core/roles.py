"""Staff roles (Django groups): support, compliance, engineer; a superuser has all. And the tenants
a user is a member of (the console's memberships).

The console checks them on every page and action, and the API on staff sessions.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db import connection

SUPPORT, COMPLIANCE, ENGINEER = "support", "compliance", "engineer"
ROLES = (SUPPORT, COMPLIANCE, ENGINEER)


def user_roles(user: Any) -> set[str]:
    if not user.is_authenticated or not user.is_active:
        return set()
    if user.is_superuser:
        return set(ROLES)
    return set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))


def member_tenant_ids(*, user_id: int | None) -> list[UUID]:
    """The tenants a console user is a member of, asked before any tenant is bound: through the
    narrow keeper_user_tenants function (the memberships are under row-level security)."""
    if user_id is None:
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT t FROM keeper_user_tenants(%s) AS t ORDER BY 1", [user_id])
        return [row[0] for row in cursor.fetchall()]
