"""What the support screens share: the note form, rendering a page or its polled part, the run's
status part, and an action's validate-call-audit sequence."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from console.audit import audit_record
from console.display import refusal_of
from console.forms import NoteField
from console.htmx import HtmxHttpRequest, htmx_target
from console.refusals import refusal_in_words
from console.roles import tenant_ids_for_user
from core.errors import ApplicationError
from core.models import Tenant
from runs.engine.selectors import event_latest_refusal, event_recent_list
from runs.kernel.models import AgentRun, RunStatus

NOTE_MAX = 2000  # as the REST API


class NoteForm(forms.Form):
    note = NoteField(max_length=NOTE_MAX, widget=forms.Textarea(attrs={"rows": 2, "dir": "auto"}))


def tenants_of(request: HttpRequest) -> list[UUID]:
    return tenant_ids_for_user(request.user)


def support_render(
    request: HtmxHttpRequest, template: str, context: dict[str, Any], status: int = 200
) -> HttpResponse:
    """The page, or only its polled part when htmx asks for it (the same view and context)."""
    target = htmx_target(request)
    if target == "run-status":  # the approval, operation and run pages all show the run page's part
        template = "console/support/run.html#run-status"
    elif target == "inbox-rows":
        template = "console/support/inbox.html#inbox-rows"
    return render(request, template, context, status=status)


def run_context(run: AgentRun) -> dict[str, Any]:
    """The run's status part: the run, its latest refusal (raw and in words) and its recent events."""
    refused = event_latest_refusal(run=run) if run.status == RunStatus.SUSPENDED else None
    refusal = refusal_of(refused) if refused is not None else None
    return {
        "run": run,
        "refusal": refusal,
        "refusal_words": refusal_in_words(refusal) if refusal is not None else None,
        "events": event_recent_list(run=run),
    }


def support_act(
    request: HtmxHttpRequest,
    form: forms.Form,
    *,
    perform: Callable[[dict[str, Any]], object],
    page: Callable[[forms.Form, int], HttpResponse],
    action: str,
    tenant: Tenant,
    target_type: str,
    target_id: Any,
    details: dict[str, Any],
    done: str,
    next_url: str,
) -> HttpResponse:
    """Validate, call the service, then audit. Not one transaction: the run services enqueue the
    worker's wake-up themselves (run_resume sends it before any outer commit), so wrapping them
    would wake a worker that cannot yet see the request."""
    if not form.is_valid():
        return page(form, 422)
    try:
        perform(form.cleaned_data)
    except ApplicationError as exc:
        form.add_error(None, exc.message)
        return page(form, exc.http_status if 400 <= exc.http_status < 500 else 409)
    audit_record(
        request=request,
        action=action,
        tenant=tenant,
        target_type=target_type,
        target_id=target_id,
        note=form.cleaned_data["note"],
        details=details,
    )
    messages.success(request, done)
    return redirect(next_url)
