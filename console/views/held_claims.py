"""The poisoning review queue: held memory claims of a tenant, approve or reject, roll back a source.

Support or compliance; the tenant must be the user's (another tenant is 404). Every decision writes
an audit entry naming the claim (or the source) and the decision, with the reviewer's note.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from console.audit import actor_of, audit_record
from console.forms import NoteField
from console.htmx import HtmxHttpRequest
from console.roles import COMPLIANCE, SUPPORT, role_required, tenant_for_user, user_tenants
from core.errors import ApplicationError
from core.models import Tenant
from core.tenancy import tenant_scope
from memory.poisoning.models import HeldClaim, HeldStatus
from memory.review import held_claim_approve, held_claim_reject, source_rollback

PAGE = 100


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "approve"), ("reject", "reject")])
    note = NoteField(max_length=2000, strip=True)


class RollbackForm(forms.Form):
    source = forms.CharField(label="Source (provenance source_id)", max_length=500, strip=False)
    note = NoteField(label="Why (for the audit log)", max_length=2000, strip=True)


def _page(request: HtmxHttpRequest, scope: Tenant, status: int = 200, **extra: Any) -> HttpResponse:
    shown = request.GET.get("status", HeldStatus.HELD)
    if shown not in HeldStatus.values:
        shown = HeldStatus.HELD
    with tenant_scope(scope.tenant_id):
        claims = list(HeldClaim.objects.filter(status=shown).order_by("-created_at")[:PAGE])
    context = {
        "tenant": scope,
        "claims": claims,
        "shown": shown,
        "statuses": HeldStatus.values,
        "rollback_form": extra.pop("rollback_form", RollbackForm()),
        **extra,
    }
    return render(request, "console/held_claims.html", context, status=status)


@role_required(SUPPORT, COMPLIANCE)
@require_GET
def held_claim_home(request: HtmxHttpRequest) -> HttpResponse:
    """The menu's way in: the held claims of the user's tenant, or a choice of their tenants."""
    tenants = list(user_tenants(request.user))
    if len(tenants) == 1:
        return redirect("console:held_claims", tenant=tenants[0].slug)
    return render(request, "console/held_claims_home.html", {"tenants": tenants})


@role_required(SUPPORT, COMPLIANCE)
@require_GET
def held_claim_list(request: HtmxHttpRequest, tenant: str) -> HttpResponse:
    return _page(request, tenant_for_user(request.user, tenant))


@role_required(SUPPORT, COMPLIANCE)
@require_POST
def held_claim_decide(request: HtmxHttpRequest, tenant: str, held_id: UUID) -> HttpResponse:
    scope = tenant_for_user(request.user, tenant)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _page(request, scope, status=400, error="Choose approve or reject and write a note.")
    decision, note = form.cleaned_data["decision"], form.cleaned_data["note"]
    decide = held_claim_approve if decision == "approve" else held_claim_reject
    try:
        done = decide(tenant=scope, held_id=held_id, actor=actor_of(request), note=note)
    except ApplicationError as exc:
        return _page(request, scope, status=exc.http_status, error=exc.message)
    audit_record(
        request=request,
        action=f"held_claim_{decision}",
        tenant=scope,
        target_type="held_claim",
        target_id=held_id,
        note=note,
        details={"signals": done.signals, "source": done.source, "memory_id": str(done.memory_id or "")},
    )
    messages.success(request, f"Claim {decision}d.")
    return redirect("console:held_claims", tenant=scope.slug)


@role_required(SUPPORT, COMPLIANCE)
@require_POST
def held_claim_rollback(request: HtmxHttpRequest, tenant: str) -> HttpResponse:
    """Every claim from one source: current memory invalidated, held ones rejected."""
    scope = tenant_for_user(request.user, tenant)
    form = RollbackForm(request.POST)
    if not form.is_valid():
        return _page(request, scope, status=400, rollback_form=form)
    source, note = form.cleaned_data["source"], form.cleaned_data["note"]
    try:
        done = source_rollback(tenant=scope, source=source, actor=actor_of(request), note=note)
    except ApplicationError as exc:
        form.add_error("source", exc.message)
        return _page(request, scope, status=exc.http_status, rollback_form=form)
    audit_record(
        request=request,
        action="memory_source_rollback",
        tenant=scope,
        target_type="memory_source",
        target_id=source,
        note=note,
        details={"items_invalidated": done.items_invalidated, "held_rejected": done.held_rejected},
    )
    messages.success(
        request,
        f"Rolled back {done.items_invalidated} memory item(s) and {done.held_rejected} held claim(s) of {source}.",
    )
    return redirect("console:held_claims", tenant=scope.slug)
