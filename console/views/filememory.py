"""Compliance: a subject's MEMORY.md, read and edited (a note is required; every save is audited
by subject digest), and the inferred claims waiting for the subject's confirmation."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode
from uuid import UUID

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from console.audit import actor_of, audit_record
from console.forms import NoteField
from console.htmx import HtmxHttpRequest
from console.roles import COMPLIANCE, role_required, tenant_for_user
from console.views.compliance import SubjectInvalid, _subject
from core.errors import ApplicationError
from core.models import Tenant
from core.tenancy import tenant_scope
from memory.confirmation import pending_confirm
from memory.consent import CONSENT_BASES
from memory.erasure import subject_digest
from memory.filememory import MEMORY_MD_MAX_BYTES, memory_md_apply, memory_md_render
from memory.poisoning.models import UNCONFIRMED, HeldClaim, HeldStatus


class MemoryFileForm(forms.Form):
    content = forms.CharField(
        label="MEMORY.md",
        max_length=MEMORY_MD_MAX_BYTES,
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 20, "dir": "auto", "spellcheck": "false", "class": "mono"}),
        help_text="One claim a line: - namespace/key: JSON value. Keep a line's <!-- id=... --> to change "
        "its claim; delete a line to invalidate it; a line without an id is a new claim. A line's "
        "consent=... is the basis its claim is kept with.",
    )
    consent_basis = forms.ChoiceField(
        label="Consent basis of the lines that name none",
        choices=[("", "none stated"), *((b, b) for b in CONSENT_BASES)],
        required=False,
        help_text="Only a basis the subject gave. With none, a line about health, religion, politics or "
        "another sensitive category waits below for the subject's confirmation instead of being kept.",
    )
    note = NoteField(
        label="Note for the audit log (the reason, a ticket number)",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2, "dir": "auto"}),
        help_text="Do not write the subject id or their data here: the audit log is kept for ever.",
    )

    def clean_note(self) -> str:
        note = self.cleaned_data["note"].strip()
        if not note:
            raise forms.ValidationError("A note is required.")
        return note


def _pending(tenant: Tenant, subject: str) -> list[HeldClaim]:
    with tenant_scope(tenant.tenant_id):
        return list(
            # Waiting for consent alone: a claim the screen held too is the review queue's.
            HeldClaim.objects.filter(
                tenant_id=tenant.tenant_id, subject_id=subject, status=HeldStatus.HELD, signals=[UNCONFIRMED]
            )
        )


def _page(tenant: Tenant, subject: str) -> str:
    return reverse("console:compliance_memory_md", args=[tenant.slug]) + "?" + urlencode({"subject": subject})


@role_required(COMPLIANCE)
@require_http_methods(["GET", "POST"])
def memory_md_page(request: HtmxHttpRequest, tenant: str) -> HttpResponse:
    """The subject's MEMORY.md in a textarea; POST with a note writes the edit back as claims."""
    scope = tenant_for_user(request.user, tenant)
    data = request.POST if request.method == "POST" else request.GET
    try:
        subject = _subject(data.get("subject"))
    except SubjectInvalid as exc:
        return HttpResponse(str(exc), status=422, content_type="text/plain; charset=utf-8")
    current = memory_md_render(tenant=scope, subject_id=subject)
    form = MemoryFileForm(request.POST if request.method == "POST" else None, initial={"content": current})
    line_errors: list[dict[str, Any]] = []
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():  # the claims and the audit entry exist together or not at all
                edit = memory_md_apply(
                    tenant=scope,
                    subject_id=subject,
                    text=form.cleaned_data["content"],
                    editor=actor_of(request),
                    operator=True,
                    consent_basis=form.cleaned_data["consent_basis"] or None,
                )
                audit_record(
                    request=request,
                    action="memory_md_edit",
                    tenant=scope,
                    target_type="subject",
                    target_id=subject_digest(tenant_id=scope.tenant_id, subject_id=subject),
                    note=form.cleaned_data["note"],
                    details=edit.as_json(),
                )
        except ApplicationError as exc:
            form.add_error(None, str(exc))
            line_errors = exc.details.get("lines", [])
        else:
            waiting = (
                f" {len(edit.held)} wait for the subject's confirmation or a review." if edit.held else ""
            )
            messages.success(
                request,
                f"MEMORY.md saved: {edit.added} added, {edit.superseded} changed, "
                f"{edit.invalidated} removed, {edit.unchanged} unchanged.{waiting}",
            )
            return redirect(_page(scope, subject))
    status = 422 if request.method == "POST" else 200
    return render(
        request,
        "console/compliance/memory_md.html",
        {
            "tenant": scope,
            "subject": subject,
            "form": form,
            "line_errors": line_errors,
            "pending": _pending(scope, subject),
        },
        status=status,
    )


class ConfirmForm(forms.Form):
    note = NoteField(max_length=2000, strip=True)


@role_required(COMPLIANCE)
@require_POST
def pending_confirm_view(request: HtmxHttpRequest, tenant: str, pending_id: UUID) -> HttpResponse:
    """A person confirms an inferred claim for the subject (the note says how they confirmed)."""
    scope = tenant_for_user(request.user, tenant)
    try:
        subject = _subject(request.POST.get("subject"))
    except SubjectInvalid as exc:
        return HttpResponse(str(exc), status=422, content_type="text/plain; charset=utf-8")
    form = ConfirmForm(request.POST)
    if not form.is_valid():
        messages.error(request, "A note is required to confirm a claim.")
        return redirect(_page(scope, subject))
    try:
        with transaction.atomic():
            item = pending_confirm(
                tenant=scope, pending_id=pending_id, actor=actor_of(request), subject_id=subject
            )
            audit_record(
                request=request,
                action="memory_confirm",
                tenant=scope,
                target_type="memory_item",
                target_id=item.memory_id,
                note=form.cleaned_data["note"],
                details={"pending_id": str(pending_id)},
            )
    except ApplicationError as exc:
        messages.error(request, str(exc))
    else:
        messages.success(request, f"Confirmed: {item.namespace}/{item.key} is now memory.")
    return redirect(_page(scope, subject))
