"""Compliance: offboard a whole tenant (export it, then erase it with a typed confirmation) and its receipts.

Every view checks the compliance role; the tenant pages also the user's membership (another tenant
is 404). A receipt outlives its tenant (and the memberships that went with it), so its page is shown
to the user who asked for it and to superusers. Every action writes an audit entry; the erasure's
entries name no tenant (the tenant's own entries are erased with it, these stay).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, cast
from uuid import UUID

from django import forms
from django.contrib import messages
from django.http import FileResponse, Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console.audit import actor_of, audit_record
from console.forms import NoteField
from console.htmx import HtmxHttpRequest
from console.models import Membership
from console.roles import COMPLIANCE, role_required, tenant_for_user
from core.errors import ApplicationError
from core.models import OffboardingStatus, Tenant, TenantOffboarding
from core.offboarding import tenant_erase, tenant_export, tenant_indexes, tenant_scan


class TenantEraseForm(forms.Form):
    slug_confirm = forms.CharField(
        label="Type the tenant's slug to confirm",
        max_length=64,
        strip=False,
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    note = NoteField(
        label="Note for the audit log (the reason, a contract or ticket number)",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "dir": "auto"}),
    )

    def __init__(self, *args: Any, slug: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.slug = slug

    def clean_slug_confirm(self) -> str:
        typed = self.cleaned_data["slug_confirm"]
        if typed != self.slug:
            raise forms.ValidationError("This does not match the slug of the tenant being erased.")
        return typed

    def clean_note(self) -> str:
        note = self.cleaned_data["note"].strip()
        if not note:
            raise forms.ValidationError("A note is required.")
        return note


def _page(request: HtmxHttpRequest, scope: Tenant, form: TenantEraseForm, status: int = 200) -> HttpResponse:
    scan = tenant_scan(tenant_id=scope.tenant_id)
    context = {
        "tenant": scope,
        "form": form,
        "counts": sorted((k, v) for k, v in scan.items() if v),
        "indexes": tenant_indexes(tenant_id=scope.tenant_id),
        "exports": TenantOffboarding.objects.filter(
            tenant_id=scope.tenant_id, status=OffboardingStatus.EXPORTED
        ).order_by("-created_at")[:20],
        "unfinished": TenantOffboarding.objects.filter(
            tenant_id=scope.tenant_id, status__in=[OffboardingStatus.ERASING, OffboardingStatus.FAILED]
        ).first(),
    }
    return render(request, "console/compliance/offboarding.html", context, status=status)


@role_required(COMPLIANCE)
@require_GET
def offboarding_page(request: HtmxHttpRequest, tenant: str) -> HttpResponse:
    """What the tenant holds (rows per table, its own indexes, Redis windows), its exports, and the
    erase form."""
    scope = tenant_for_user(request.user, tenant)
    return _page(request, scope, TenantEraseForm(slug=scope.slug))


@role_required(COMPLIANCE)
@require_POST
def offboarding_export(request: HtmxHttpRequest, tenant: str) -> HttpResponse:
    """Export the tenant and send the file (its SHA-256 is in the receipt and the audit entry)."""
    scope = tenant_for_user(request.user, tenant)
    handle, name = tempfile.mkstemp(suffix=".jsonl.gz")
    os.close(handle)
    path = Path(name)
    try:
        done = tenant_export(tenant=scope, out=path, requested_by=actor_of(request))
        audit_record(
            request=request,
            action="tenant_export",
            tenant=scope,
            target_type="tenant",
            target_id=scope.tenant_id,
            details={"offboarding_id": str(done.offboarding_id), "sha256": done.export_digest},
        )
        stream = path.open("rb")
    finally:
        path.unlink(missing_ok=True)  # the open file stays readable until the response closes it
    # A streamed file, not a body in memory (the role decorator is typed for HttpResponse).
    return cast(
        HttpResponse, FileResponse(stream, as_attachment=True, filename=f"tenant-{scope.slug}.jsonl.gz")
    )


@role_required(COMPLIANCE)
@require_POST
def offboarding_erase(request: HtmxHttpRequest, tenant: str) -> HttpResponse:
    """Erase the tenant (typed slug and a note); then its receipt. Refused while runs hold a lease."""
    scope = tenant_for_user(request.user, tenant)
    form = TenantEraseForm(request.POST, slug=scope.slug)
    if not form.is_valid():
        return _page(request, scope, form, status=400)
    actor = actor_of(request)
    details = {"tenant_id": str(scope.tenant_id), "slug": scope.slug, "name": scope.name}
    # The tenant's staff (by user id: accounts, not subjects), so each is told at sign-in that their
    # tenant is gone; the memberships go with the tenant.
    members = sorted(Membership.objects.filter(tenant=scope).values_list("user_id", flat=True))
    # Not the tenant's entry (those go with it): this one and the outcome's stay.
    audit_record(
        request=request,
        action="tenant_erase_requested",
        target_type="tenant",
        target_id=scope.tenant_id,
        note=form.cleaned_data["note"],
        details=details,
    )
    try:
        done = tenant_erase(slug=scope.slug, confirm=form.cleaned_data["slug_confirm"], requested_by=actor)
    except ApplicationError as exc:
        # Refused (a run of the tenant holds a live lease), or stopped part-way: marked failed, and
        # erasing again resumes it.
        stopped = exc.code == "tenant_erase_interrupted"
        audit_record(
            request=request,
            action="tenant_erase_interrupted" if stopped else "tenant_erase_refused",
            target_type="tenant",
            target_id=scope.tenant_id,
            details={**details, "reason": exc.message},
        )
        form.add_error(None, exc.message)
        busy = stopped or exc.code == "tenant_runs_leased"
        return _page(request, scope, form, status=409 if busy else 400)
    audit_record(
        request=request,
        action="tenant_erased",
        target_type="tenant_offboarding",
        target_id=done.offboarding_id,
        details={
            **details,
            "clean": bool(done.receipt.get("clean")),
            "status": done.status,
            "members": members,
        },
    )
    messages.success(request, f"Tenant {scope.slug} erased.")
    return redirect("console:compliance_offboarding_receipt", offboarding_id=done.offboarding_id)


def _receipt_for(request: HtmxHttpRequest, offboarding_id: UUID) -> TenantOffboarding:
    found = TenantOffboarding.objects.filter(offboarding_id=offboarding_id).first()
    if found is None or not (request.user.is_superuser or found.requested_by == actor_of(request)):
        raise Http404("no such offboarding")
    return found


@role_required(COMPLIANCE)
@require_GET
def offboarding_receipt(request: HtmxHttpRequest, offboarding_id: UUID) -> HttpResponse:
    done = _receipt_for(request, offboarding_id)
    receipt = done.receipt
    context = {
        "done": done,
        "deleted": sorted((receipt.get("deleted") or {}).items()),
        "scan": sorted((receipt.get("final_scan") or {}).items()),
        "receipt_json": json.dumps(receipt, indent=2, sort_keys=True),
    }
    return render(request, "console/compliance/offboarding_receipt.html", context)


@role_required(COMPLIANCE)
@require_http_methods(["GET"])
def offboarding_receipt_json(request: HtmxHttpRequest, offboarding_id: UUID) -> HttpResponse:
    done = _receipt_for(request, offboarding_id)
    response = JsonResponse(done.receipt, json_dumps_params={"indent": 2, "sort_keys": True})
    response["Content-Disposition"] = f'attachment; filename="offboarding-receipt-{done.offboarding_id}.json"'
    return response


@role_required(COMPLIANCE)
@require_GET
def offboarding_list(request: HtmxHttpRequest) -> HttpResponse:
    """The offboardings (exports and erasures of whole tenants) the user asked for; all for a superuser.
    A receipt outlives its tenant, so this list is not by tenant."""
    done = TenantOffboarding.objects.order_by("-created_at")
    if not request.user.is_superuser:
        done = done.filter(requested_by=actor_of(request))
    return render(request, "console/compliance/offboarding_list.html", {"offboardings": done[:200]})
