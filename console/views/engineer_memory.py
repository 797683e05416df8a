"""The engineer's memory view: a tenant's claims (a subject's, or the newest of anyone's) with their
state, supersede chains and provenance, each source leading to the run's event it names. Reads only."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from console.display import claim_chains
from console.htmx import HtmxHttpRequest
from console.roles import ENGINEER, role_required, tenant_for_user, user_tenants
from memory.selectors import memory_item_recent_list, memory_subject_items

RECENT = 100
MAX_SUBJECT = 200


@role_required(ENGINEER)
@require_safe
def memory_view(request: HtmxHttpRequest) -> HttpResponse:
    tenants = list(user_tenants(request.user))
    chosen = request.GET.get("tenant") or (tenants[0].slug if tenants else "")
    tenant = tenant_for_user(request.user, chosen) if chosen else None
    subject = str(request.GET.get("subject", ""))[:MAX_SUBJECT]
    context: dict[str, Any] = {"tenants": tenants, "tenant": tenant, "subject": subject}
    if tenant is not None:
        items = (
            memory_subject_items(tenant=tenant, subject_id=subject)
            if subject.strip()
            else memory_item_recent_list(tenant=tenant, limit=RECENT)
        )
        context["chains"] = claim_chains(items, now=timezone.now())
        context["count"] = len(items)
        context["recent"] = RECENT if not subject.strip() else None
    return render(request, "console/engineer/memory.html", context)
