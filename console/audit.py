"""Writing the audit log: one entry per human action, with actor, time, tenant, target and note."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest

from console.models import AuditEntry
from core.models import Tenant


def actor_of(request: HttpRequest) -> str:
    return f"user:{request.user.get_username()}" if request.user.is_authenticated else "anonymous"


def audit_record(
    *,
    request: HttpRequest,
    action: str,
    tenant: Tenant | None = None,
    target_type: str = "",
    target_id: Any = "",
    note: str = "",
    details: dict[str, Any] | None = None,
    actor: str | None = None,
) -> AuditEntry:
    return AuditEntry.objects.create(
        actor=actor or actor_of(request),
        tenant=tenant,
        action=action,
        target_type=target_type,
        target_id=str(target_id),
        note=note,
        details=details or {},
        remote_addr=request.META.get("REMOTE_ADDR", "")[:64],
    )
