"""Writing the audit log: one entry per human action, with actor, time, tenant, target and note;
reading it: the target's page, and CSV cells a spreadsheet cannot run as formulas."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.urls import NoReverseMatch, reverse

from console.models import AuditEntry
from core.api_auth import SESSION_MARK, SESSION_TENANT
from core.digests import sha256_digest
from core.models import Tenant

logger = logging.getLogger(__name__)


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


def audit_denied(request: HttpRequest, *, why: str, needs: tuple[str, ...] = ()) -> None:
    """A refused action: an unsafe request by a signed-in user that a role or the CSRF check turned
    away, named by its view (not its path or form, which may name a person). Reading a page one may
    not see is not an action; anonymous requests are not anyone's."""
    if request.method in ("GET", "HEAD", "OPTIONS") or not request.user.is_authenticated:
        return
    match = getattr(request, "resolver_match", None)
    view = match.view_name if match is not None else ""
    # The log is append-only: a refusal repeated within a minute (one user's script, a flood) is
    # written once, not once a request (a script can write 1,200 rows in 5 s).
    try:
        if not cache.add(
            f"audit-denied:{sha256_digest(f'{request.user.pk}|{view}|{request.method}')}", 1, 60
        ):
            return
    except Exception:  # the cache is down: the refusal is written anyway
        logger.warning("the repeat check of a refused action failed; writing it", exc_info=True)
    details: dict[str, Any] = {"method": request.method}
    if needs:
        details["needs"] = list(needs)
    audit_record(
        request=request,
        action="denied",
        target_type="view",
        target_id=view,
        note=why,
        details=details,
    )


def audit_target_url(entry: AuditEntry, roles: set[str]) -> str:
    """The page of an entry's target, if the reader's roles open one ("" otherwise)."""
    kind, target = entry.target_type, entry.target_id
    try:
        if kind == "run" and "engineer" in roles:
            return reverse("console:run_detail", args=[UUID(target)])
        if kind == "run" and "support" in roles:
            return reverse("console:support_run", args=[UUID(target)])
        if kind == "approval" and "support" in roles:
            return reverse("console:support_approval", args=[UUID(target)])
        if kind == "erasure_request" and "compliance" in roles and entry.tenant is not None:
            return reverse("console:compliance_erasure_detail", args=[entry.tenant.slug, UUID(target)])
    except (ValueError, NoReverseMatch):
        return ""
    return ""


CSV_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """A cell a spreadsheet shows as text: one starting like a formula gets a leading apostrophe."""
    text = "" if value is None else str(value)
    return f"'{text}" if text.startswith(CSV_FORMULA_STARTS) else text


class ApiSessionAuditMiddleware:
    """Every change a staff session asks of the REST API goes into the audit log, as the console's own
    actions do (else an erasure or a run started through the API with a console session would leave
    no trace). The route's pattern and the ids in it are recorded, never the body.
    Calls with an API key are the tenant's own and are not audited here."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if request.method not in ("GET", "HEAD", "OPTIONS", "TRACE") and getattr(
            request, SESSION_MARK, False
        ):
            # Marked by the API's permission check (core.api_auth) when no key authenticated the call,
            # not read from the header: a Basic Authorization header would slip a session's change
            # past a check on the header. The tenant is the one the call acted in, so its staff see it.
            tenant_id = getattr(request, SESSION_TENANT, None)
            match = request.resolver_match
            # Ids only (a run's, an approval's): a path can name a subject (memory.md), never logged.
            ids = {k: str(v) for k, v in (match.kwargs if match else {}).items() if isinstance(v, UUID | int)}
            audit_record(
                request=request,
                action="api",
                tenant=Tenant.objects.filter(tenant_id=tenant_id).first() if tenant_id else None,
                target_type="api",
                target_id=next(iter(ids.values()), ""),
                details={
                    "method": request.method,
                    "route": match.route if match else "",
                    "ids": ids,
                    "status": response.status_code,
                },
            )
        return response
