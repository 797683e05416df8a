"""Engineer screens for schedules (next fire time, last run; create and change them, pause, resume and
delete, each with a note and audited) and for workflows (runs by status per version, and which
versions are drained)."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django import forms
from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_safe

from console.audit import actor_of, audit_record
from console.forms import NoteField
from console.htmx import HtmxHttpRequest
from console.roles import ENGINEER, role_required, user_tenants
from console.views.engineer_bulk import NOTE_MAX, ConfirmedNoteForm
from core.errors import ApplicationError, NotFound
from core.models import Tenant
from runs.engine.registry import registry
from runs.engine.schedule_models import OverlapPolicy, WorkflowSchedule
from runs.engine.schedules import (
    schedule_create,
    schedule_delete,
    schedule_update,
    schedule_views,
    schedule_visible,
)
from runs.engine.versions import workflow_versions

# What each action does, as the confirmation page says it.
EFFECTS = {
    "pause": [
        "The schedule starts no run until it is resumed; runs it already started go on.",
        "Slots that pass while it is paused are not made up when it resumes.",
    ],
    "resume": [
        "The schedule fires again from its next slot after now (slots missed while paused are not made up).",
    ],
    "delete": [
        "The schedule is removed for good; runs it already started stay, with their history.",
    ],
}
LABELS = {"pause": "Pause", "resume": "Resume", "delete": "Delete"}


@role_required(ENGINEER)
@require_safe
def schedule_list(request: HtmxHttpRequest) -> HttpResponse:
    return render(
        request,
        "console/engineer/schedules.html",
        {"rows": schedule_views(tenant=None), "now": timezone.now()},
    )


def _schedule(schedule_id: UUID) -> WorkflowSchedule:
    try:
        return schedule_visible(schedule_id=schedule_id)
    except NotFound:
        raise Http404("no such schedule") from None


def _apply(request: HtmxHttpRequest, schedule: WorkflowSchedule, action: str, note: str) -> None:
    """The service call and its audit entry, both or neither."""
    actor = actor_of(request)
    with transaction.atomic():
        if action == "delete":
            schedule_delete(tenant=schedule.tenant, schedule_id=schedule.schedule_id, actor=actor)
        else:
            schedule_update(
                tenant=schedule.tenant,
                schedule_id=schedule.schedule_id,
                actor=actor,
                enabled=action == "resume",
            )
        audit_record(
            request=request,
            action=f"schedule_{action}",
            tenant=schedule.tenant,
            target_type="schedule",
            target_id=schedule.schedule_id,
            note=note,
            details={
                "workflow": schedule.workflow_name,
                "cron": schedule.cron,
                "interval_seconds": schedule.interval_seconds,
            },
        )


@role_required(ENGINEER)
@require_http_methods(["GET", "POST"])
def schedule_action(request: HtmxHttpRequest, schedule_id: UUID, action: str) -> HttpResponse:
    """Pause, resume or delete: a GET (or the list's button) shows what will happen; the POST with the
    confirmation and a note applies it. A missing note is a form error (422) and applies nothing."""
    schedule = _schedule(schedule_id)
    form = ConfirmedNoteForm(request.POST if request.method == "POST" and "confirm" in request.POST else None)
    context: dict[str, Any] = {
        "schedule": schedule,
        "action": action,
        "label": LABELS[action],
        "effects": EFFECTS[action],
        "note_max": NOTE_MAX,
        "pointless": (action == "pause" and not schedule.enabled)
        or (action == "resume" and schedule.enabled),
    }
    if not form.is_bound:
        context["form"] = ConfirmedNoteForm(initial={"note": str(request.POST.get("note", ""))[:NOTE_MAX]})
        return render(request, "console/engineer/schedule_confirm.html", context)
    if not form.is_valid() or context["pointless"]:
        context["form"] = form
        return render(request, "console/engineer/schedule_confirm.html", context, status=422)
    try:
        _apply(request, schedule, action, form.cleaned_data["note"])
    except ApplicationError as exc:
        messages.error(request, f"{LABELS[action]} refused: {exc.message}")
        return redirect("console:schedule_list")
    messages.success(request, f"{LABELS[action]}: done for the schedule of {schedule.workflow_name}")
    return redirect("console:schedule_list")


class ScheduleForm(forms.Form):
    """A schedule's timing (a cron expression in UTC, or every N seconds), its run's input and overlap
    policy; on creation also the tenant and the workflow. The service checks the rest (the cron
    expression, the input against the workflow) and its refusal is shown on the form."""

    tenant = forms.ChoiceField(choices=[])
    workflow_name = forms.ChoiceField(choices=[], label="Workflow")
    cron = forms.CharField(required=False, max_length=200, label="Cron (UTC; or leave empty)")
    interval_seconds = forms.IntegerField(required=False, min_value=1, label="Or every N seconds")
    input = forms.CharField(required=False, max_length=100_000, strip=False, label="Input of each run (JSON)")
    overlap = forms.ChoiceField(choices=OverlapPolicy.choices, initial=OverlapPolicy.SKIP)
    note = NoteField(
        max_length=NOTE_MAX, required=True, strip=True, label="Note (why; kept in the audit log)"
    )

    def __init__(self, *args: Any, tenants: list[Tenant], editing: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenants = {t.slug: t for t in tenants}
        self.fields["tenant"].choices = [(t.slug, f"{t.name} ({t.slug})") for t in tenants]  # type: ignore[attr-defined]
        self.fields["workflow_name"].choices = [(n, n) for n in registry.names()]  # type: ignore[attr-defined]
        if editing:  # a schedule stays in its tenant and on its workflow
            del self.fields["tenant"], self.fields["workflow_name"]

    def clean_input(self) -> Any:
        raw = self.cleaned_data.get("input", "")
        if not raw.strip():
            return {}
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise forms.ValidationError(f"the input is not JSON ({exc})") from None
        except RecursionError:
            raise forms.ValidationError("the input nests too deep to read") from None

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if bool((data.get("cron") or "").strip()) == (data.get("interval_seconds") is not None):
            raise forms.ValidationError("Give either a cron expression or a number of seconds, not both.")
        data["cron"] = (data.get("cron") or "").strip() or None
        return data


def _form_page(
    request: HtmxHttpRequest, form: ScheduleForm, schedule: WorkflowSchedule | None, status: int = 200
) -> HttpResponse:
    return render(
        request, "console/engineer/schedule_form.html", {"form": form, "schedule": schedule}, status=status
    )


@role_required(ENGINEER)
@require_http_methods(["GET", "POST"])
def schedule_new(request: HtmxHttpRequest) -> HttpResponse:
    """A new schedule (GET: the form). Created active; its first slot is the first after now."""
    tenants = list(user_tenants(request.user))
    form = ScheduleForm(request.POST or None, tenants=tenants, initial={"input": "{}"})
    if request.method != "POST":
        return _form_page(request, form, None)
    if not form.is_valid():
        return _form_page(request, form, None, status=422)
    data, actor = form.cleaned_data, actor_of(request)
    tenant = form.tenants[data["tenant"]]
    try:
        with transaction.atomic():
            made = schedule_create(
                tenant=tenant,
                workflow_name=data["workflow_name"],
                input=data["input"],
                actor=actor,
                cron=data["cron"],
                interval_seconds=data["interval_seconds"],
                overlap=data["overlap"],
            )
            audit_record(
                request=request,
                action="schedule_create",
                tenant=tenant,
                target_type="schedule",
                target_id=made.schedule_id,
                note=data["note"],
                details={
                    "workflow": made.workflow_name,
                    "cron": made.cron,
                    "interval_seconds": made.interval_seconds,
                },
            )
    except ApplicationError as exc:
        form.add_error(None, exc.message)
        return _form_page(
            request, form, None, status=exc.http_status if 400 <= exc.http_status < 500 else 422
        )
    messages.success(
        request,
        f"Schedule of {made.workflow_name} created: it first fires at {made.next_fire_at:%Y-%m-%d %H:%M:%S} UTC.",
    )
    return redirect("console:schedule_list")


@role_required(ENGINEER)
@require_http_methods(["GET", "POST"])
def schedule_edit(request: HtmxHttpRequest, schedule_id: UUID) -> HttpResponse:
    """Change a schedule's timing, input or overlap (a new timing counts its slots from now)."""
    schedule = _schedule(schedule_id)
    initial = {
        "cron": schedule.cron or "",
        "interval_seconds": schedule.interval_seconds,
        "input": json.dumps(schedule.input, ensure_ascii=False),
        "overlap": schedule.overlap,
    }
    form = ScheduleForm(request.POST or None, tenants=[schedule.tenant], editing=True, initial=initial)
    if request.method != "POST":
        return _form_page(request, form, schedule)
    if not form.is_valid():
        return _form_page(request, form, schedule, status=422)
    data = form.cleaned_data
    try:
        with transaction.atomic():
            changed = schedule_update(
                tenant=schedule.tenant,
                schedule_id=schedule.schedule_id,
                actor=actor_of(request),
                input=data["input"],
                overlap=data["overlap"],
                cron=data["cron"],
                interval_seconds=data["interval_seconds"],
            )
            audit_record(
                request=request,
                action="schedule_edit",
                tenant=schedule.tenant,
                target_type="schedule",
                target_id=schedule.schedule_id,
                note=data["note"],
                details={
                    "workflow": schedule.workflow_name,
                    "before": {"cron": schedule.cron, "interval_seconds": schedule.interval_seconds},
                    "after": {"cron": changed.cron, "interval_seconds": changed.interval_seconds},
                },
            )
    except ApplicationError as exc:
        form.add_error(None, exc.message)
        return _form_page(
            request, form, schedule, status=exc.http_status if 400 <= exc.http_status < 500 else 422
        )
    messages.success(request, f"Schedule of {schedule.workflow_name} changed.")
    return redirect("console:schedule_list")


@role_required(ENGINEER)
@require_safe
def workflow_list(request: HtmxHttpRequest) -> HttpResponse:
    return render(request, "console/engineer/workflows.html", {"workflows": workflow_versions(tenant=None)})
