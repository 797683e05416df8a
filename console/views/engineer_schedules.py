"""Engineer screens for schedules (next fire time, last run; pause, resume and delete, each confirmed
with a note and audited) and for workflows (runs by status per version, and which versions are drained)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.contrib import messages
from django.db import transaction
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods, require_safe

from console.audit import actor_of, audit_record
from console.htmx import HtmxHttpRequest
from console.roles import ENGINEER, role_required
from console.views.engineer_bulk import NOTE_MAX, ConfirmedNoteForm
from core.errors import ApplicationError, NotFound
from runs.engine.schedule_models import WorkflowSchedule
from runs.engine.schedules import schedule_delete, schedule_update, schedule_views, schedule_visible
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


@role_required(ENGINEER)
@require_safe
def workflow_list(request: HtmxHttpRequest) -> HttpResponse:
    return render(request, "console/engineer/workflows.html", {"workflows": workflow_versions(tenant=None)})
