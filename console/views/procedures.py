"""Procedural memory in the console: the procedures learned from runs, confirm, reject or edit one.

Support or engineer; the tenant must be the user's (another tenant is 404). Every decision writes an
audit entry naming the procedure, the decision and its version, with the person's note.
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
from console.roles import ENGINEER, SUPPORT, role_required, tenant_for_user, user_tenants
from core.errors import ApplicationError
from core.models import Tenant
from memory.procedures.models import ProcedureStatus
from memory.procedures.selectors import procedure_list, procedure_sources
from memory.procedures.services import procedure_confirm, procedure_edit, procedure_reject

PAGE = 100
SHOWN = (*ProcedureStatus.values, "invalidated")


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("confirm", "confirm"), ("reject", "reject")])
    note = NoteField(max_length=2000, strip=True)


class EditForm(forms.Form):
    name = forms.CharField(max_length=200, strip=True)
    trigger = forms.CharField(label="Trigger words", max_length=400, strip=True)
    note = NoteField(max_length=2000, strip=True)


def _page(request: HtmxHttpRequest, scope: Tenant, status: int = 200, **extra: Any) -> HttpResponse:
    shown = request.GET.get("status", ProcedureStatus.PROPOSED)
    if shown not in SHOWN:
        shown = ProcedureStatus.PROPOSED
    if shown == "invalidated":
        found = procedure_list(tenant=scope, invalidated=True, limit=PAGE)
    else:
        found = procedure_list(tenant=scope, status=shown, invalidated=False, limit=PAGE)
    by: dict[UUID, list[Any]] = {}
    for source in procedure_sources(tenant=scope, procedure_ids=[p.procedure_id for p in found]):
        by.setdefault(source.procedure_id, []).append(source)
    rows = [{"procedure": p, "sources": by.get(p.procedure_id, [])} for p in found]
    context = {"tenant": scope, "rows": rows, "shown": shown, "statuses": SHOWN, **extra}
    return render(request, "console/procedures.html", context, status=status)


@role_required(SUPPORT, ENGINEER)
@require_GET
def procedure_home(request: HtmxHttpRequest) -> HttpResponse:
    """The menu's way in: the procedures of the user's tenant, or a choice of their tenants."""
    tenants = list(user_tenants(request.user))
    if len(tenants) == 1:
        return redirect("console:procedures", tenant=tenants[0].slug)
    return render(request, "console/procedures_home.html", {"tenants": tenants})


@role_required(SUPPORT, ENGINEER)
@require_GET
def procedure_page(request: HtmxHttpRequest, tenant: str) -> HttpResponse:
    return _page(request, tenant_for_user(request.user, tenant))


@role_required(SUPPORT, ENGINEER)
@require_POST
def procedure_decide(request: HtmxHttpRequest, tenant: str, procedure_id: UUID) -> HttpResponse:
    scope = tenant_for_user(request.user, tenant)
    form = DecisionForm(request.POST)
    if not form.is_valid():
        return _page(request, scope, status=422, error="Choose confirm or reject and write a note.")
    decision, note = form.cleaned_data["decision"], form.cleaned_data["note"]
    decide = procedure_confirm if decision == "confirm" else procedure_reject
    try:
        done = decide(tenant=scope, procedure_id=procedure_id, actor=actor_of(request), note=note)
    except ApplicationError as exc:
        return _page(request, scope, status=exc.http_status, error=exc.message)
    audit_record(
        request=request,
        action=f"procedure_{decision}",
        tenant=scope,
        target_type="procedure",
        target_id=procedure_id,
        note=note,
        details={"version": done.version, "workflow": done.workflow_name, "steps": len(done.steps)},
    )
    messages.success(request, f"Procedure {decision}ed.")
    return redirect("console:procedures", tenant=scope.slug)


@role_required(SUPPORT, ENGINEER)
@require_POST
def procedure_change(request: HtmxHttpRequest, tenant: str, procedure_id: UUID) -> HttpResponse:
    """A new name or trigger words: a new version; the steps stay what the runs did."""
    scope = tenant_for_user(request.user, tenant)
    form = EditForm(request.POST)
    if not form.is_valid():
        return _page(request, scope, status=422, error="A name, trigger words and a note are needed.")
    try:
        done = procedure_edit(
            tenant=scope,
            procedure_id=procedure_id,
            actor=actor_of(request),
            name=form.cleaned_data["name"],
            trigger=form.cleaned_data["trigger"],
            note=form.cleaned_data["note"],
        )
    except ApplicationError as exc:
        return _page(request, scope, status=exc.http_status, error=exc.message)
    audit_record(
        request=request,
        action="procedure_edit",
        tenant=scope,
        target_type="procedure",
        target_id=procedure_id,
        note=form.cleaned_data["note"],
        details={"version": done.version, "trigger": done.trigger},
    )
    messages.success(request, f"Procedure saved as version {done.version}.")
    return redirect("console:procedures", tenant=scope.slug)
