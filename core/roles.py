"""Staff roles (Django groups): support, compliance, engineer; a superuser has all.

The console checks them on every page and action, and the API on staff sessions.
"""

from __future__ import annotations

from typing import Any

SUPPORT, COMPLIANCE, ENGINEER = "support", "compliance", "engineer"
ROLES = (SUPPORT, COMPLIANCE, ENGINEER)


def user_roles(user: Any) -> set[str]:
    if not user.is_authenticated or not user.is_active:
        return set()
    if user.is_superuser:
        return set(ROLES)
    return set(user.groups.filter(name__in=ROLES).values_list("name", flat=True))
