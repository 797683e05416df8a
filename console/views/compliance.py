"""Compliance: everything kept about a subject, erasure with a confirmation step, progress, receipts.

Every view checks the compliance role and the user's membership of the tenant (another tenant is
404). The audit log records an erasure by request id and subject digest, never the subject's id.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from console.audit import actor_of, audit_record
from console.display import erasure_steps, receipt_rows
from console.forms import NoteField
from console.htmx import HtmxHttpRequest
from console.models import AuditEntry
from console.roles import COMPLIANCE, role_required, tenant_for_user, user_tenants
from console.selectors import subject_overview
from console.subject_words import places_left_in_words, subject_in_words
from console.subjects import MAX_QUERY_CHARS, subject_search
from core.errors import ApplicationError
from core.models import Tenant
from erasure.models import ErasureRequest, ErasureStatus
from erasure.selectors import erasure_request_get, erasure_request_list
from erasure.services import erasure_request_create, erasure_request_retry
from runs.engine.selectors import run_events, run_get_for_tenants

MAX_SUBJECT_CHARS = 200
ACTIVE = (ErasureStatus.PENDING, ErasureStatus.RUNNING)


class SubjectInvalid(Exception):
    pass


def _subject(raw: Any) -> str:
    """The subject id exactly as typed (ids are the tenant's own; spaces are not trimmed away)."""
    subject = str(raw or "")
    if not subject.strip() or len(subject) > MAX_SUBJECT_CHARS:
        raise SubjectInvalid(f"A subject id is 1 to {MAX_SUBJECT_CHARS} characters.")
    return subject


class ErasureConfirmForm(forms.Form):
    subject_confirm = forms.CharField(
        label="Type the subject id again",
        max_length=MAX_SUBJECT_CHARS,
        strip=False,
        widget=forms.TextInput(attrs={"autocomplete": "off", "dir": "auto", "spellcheck": "false"}),
    )
    note = NoteField(
        label="Note for the audit log (the reason, a ticket number)",
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 3, "dir": "auto"}),
        help_text="Do not write the subject id or their data here: the audit log is kept for ever.",
    )

    def __init__(self, *args: Any, subject: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.subject = subject

    def clean_subject_confirm(self) -> str:
        typed = self.cleaned_data["subject_confirm"]
        if typed != self.subject:
            raise forms.ValidationError("This does not match the subject id being erased.")
        return typed

    def clean_note(self) -> str:
        note = self.cleaned_data["note"].strip()
        if not note:
            raise forms.ValidationError("A note is required.")
        if len(self.subject) >= 3 and self.subject.casefold() in note.casefold():
            raise forms.ValidationError("The note must not contain the subject id.")
        return note


def _request_for(tenant: Tenant, request_id: UUID) -> ErasureRequest:
    found = erasure_request_get(tenant=tenant, request_id=request_id)
    if found is None:
        raise Http404("no such erasure request")
    return found


@role_required(COMPLIANCE)
@require_GET
def compliance_home(request: HtmxHttpRequest) -> HttpResponse:
    """Tenant picker and subject search; with both, the subject's overview across every store."""
    tenants = list(user_tenants(request.user))
    chosen = request.GET.get("tenant", "")
    if not chosen and len(tenants) == 1:
        chosen = tenants[0].slug
    tenant = tenant_for_user(request.user, chosen) if chosen else None
    raw_subject = request.GET.get("subject")
    context: dict[str, Any] = {"tenants": tenants, "tenant": tenant, "subject": raw_subject or ""}
    status = 200
    query = request.GET.get("q")
    if query is not None:
        context["q"] = query
        if not query.strip() or len(query) > MAX_QUERY_CHARS:
            context["q_error"], status = f"A search is 1 to {MAX_QUERY_CHARS} characters.", 422
        else:
            context["matches"] = subject_search(tenants=[tenant] if tenant else tenants, query=query.strip())
    if tenant is not None and raw_subject is not None:
        try:
            overview = subject_overview(tenant=tenant, subject_id=_subject(raw_subject))
            context["overview"] = overview
            context["words"] = subject_in_words(overview)
        except SubjectInvalid as exc:
            context["subject_error"], status = str(exc), 422
    return render(request, "console/compliance/home.html", context, status=status)


@role_required(COMPLIANCE)
@require_http_methods(["GET", "POST"])
def erasure_confirm(request: HtmxHttpRequest, tenant: str) -> HttpResponse:
    """What will be erased (counts per store); POST with the subject typed again and a note erases."""
    scope = tenant_for_user(request.user, tenant)
    data = request.POST if request.method == "POST" else request.GET
    try:
        subject = _subject(data.get("subject"))
    except SubjectInvalid as exc:
        return HttpResponse(str(exc), status=422, content_type="text/plain; charset=utf-8")
    form = ErasureConfirmForm(request.POST if request.method == "POST" else None, subject=subject)
    overview = subject_overview(tenant=scope, subject_id=subject)
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():  # the request and its audit entry exist together or not at all
                created = erasure_request_create(
                    tenant=scope, subject_id=subject, requested_by=actor_of(request)
                )
                # The request of a subject already being erased is the answer; a person who asked
                # for it already (a double click, a second tab) is not recorded again. The request's
                # lock, held to the commit, puts a concurrent click after this one's entry.
                asked = AuditEntry.objects.filter(
                    action="erase",
                    target_type="erasure_request",
                    target_id=str(created.request_id),
                    actor=actor_of(request),
                ).exists()
                if not asked:
                    audit_record(
                        request=request,
                        action="erase",
                        tenant=scope,
                        target_type="erasure_request",
                        target_id=created.request_id,
                        note=form.cleaned_data["note"],
                        details={
                            "subject_digest": created.subject_digest,
                            "expected": {s.key: s.count for s in overview.stores},
                        },
                    )
        except ApplicationError as exc:
            form.add_error(None, str(exc))
        else:
            messages.success(request, "Erasure requested; a worker is running it.")
            return redirect(
                "console:compliance_erasure_detail", tenant=scope.slug, request_id=created.request_id
            )
    status = 422 if request.method == "POST" else 200
    return render(
        request,
        "console/compliance/confirm.html",
        {"tenant": scope, "overview": overview, "words": subject_in_words(overview), "form": form},
        status=status,
    )


@role_required(COMPLIANCE)
@require_GET
def erasure_list(request: HtmxHttpRequest, tenant: str) -> HttpResponse:
    scope = tenant_for_user(request.user, tenant)
    return render(
        request,
        "console/compliance/erasure_list.html",
        {
            "tenant": scope,
            "tenants": list(user_tenants(request.user)),
            "erasures": erasure_request_list(tenant=scope),
        },
    )


@role_required(COMPLIANCE)
@require_GET
def erasure_detail(request: HtmxHttpRequest, tenant: str, request_id: UUID) -> HttpResponse:
    """The request's status and progress; once done, its receipt. htmx polls this URL for the
    status fragment until the request is no longer pending or running."""
    scope = tenant_for_user(request.user, tenant)
    erasure = _request_for(scope, request_id)
    receipt = receipt_rows(erasure.receipt)
    context = {
        "tenant": scope,
        "erasure": erasure,
        "active": erasure.status in ACTIVE,
        "steps": erasure_steps(erasure),
        "receipt": receipt,
        # What a failed request left, in words: each place still holding their data (not their memory,
        # which is kept on purpose until nothing else holds them), and whether it can be tried again.
        "left": places_left_in_words(
            [p for p in receipt.get("places", []) if p.get("after") and p.get("erased_by") != "memory"]
        ),
        "can_retry": erasure.status == ErasureStatus.FAILED and bool(erasure.subject_id),
        "status_url": reverse("console:compliance_erasure_detail", args=[scope.slug, erasure.request_id]),
    }
    partial = "#status" if request.htmx else ""
    response = render(request, f"console/compliance/erasure_detail.html{partial}", context)
    patch_vary_headers(response, ("HX-Request",))  # the page and its fragment share a URL
    return response


@role_required(COMPLIANCE)
@require_POST
def erasure_retry(request: HtmxHttpRequest, tenant: str, request_id: UUID) -> HttpResponse:
    """Retry a request that did not finish: it picks up where it stopped (audited)."""
    scope = tenant_for_user(request.user, tenant)
    erasure = _request_for(scope, request_id)
    try:
        with transaction.atomic():  # the retry and its audit entry exist together or not at all
            retried = erasure_request_retry(tenant=scope, request_id=erasure.request_id)
            audit_record(
                request=request,
                action="erase_retry",
                tenant=scope,
                target_type="erasure_request",
                target_id=retried.request_id,
                details={"subject_digest": retried.subject_digest, "status_before": erasure.status},
            )
    except ApplicationError as exc:
        messages.error(request, str(exc))
    else:
        if retried.status != ErasureStatus.COMPLETED:
            messages.success(request, "Retry requested; a worker is running it.")
    return redirect("console:compliance_erasure_detail", tenant=scope.slug, request_id=erasure.request_id)


@role_required(COMPLIANCE)
@require_GET
def erasure_receipt(request: HtmxHttpRequest, tenant: str, request_id: UUID) -> HttpResponse:
    """The receipt as a JSON file (names the subject by digest only)."""
    scope = tenant_for_user(request.user, tenant)
    erasure = _request_for(scope, request_id)
    if erasure.receipt is None:
        raise Http404("this request has no receipt yet")
    response = JsonResponse(erasure.receipt, json_dumps_params={"indent": 2, "sort_keys": True})
    response["Content-Disposition"] = f'attachment; filename="erasure-receipt-{erasure.request_id}.json"'
    return response


@role_required(COMPLIANCE)
@require_GET
def claim_source(request: HtmxHttpRequest, tenant: str, run_id: UUID) -> HttpResponse:
    """Where a remembered fact came from: the run its provenance names and the event (?seq=), with the
    events around it, as a compliance officer reads them."""
    scope = tenant_for_user(request.user, tenant)
    run = run_get_for_tenants(tenant_ids=[scope.tenant_id], run_id=run_id)
    if run is None:
        raise Http404("no such run")
    try:
        seq = int(request.GET.get("seq", "")) if request.GET.get("seq") else None
    except ValueError:
        seq = None
    events = run_events(run_id=run.run_id, after_seq=max(0, (seq or 1) - 3), limit=5) if seq else []
    return render(
        request,
        "console/compliance/source.html",
        {
            "tenant": scope,
            "run": run,
            "seq": seq,
            "events": events,
            "focus": next((e for e in events if e.seq == seq), None),
        },
    )
