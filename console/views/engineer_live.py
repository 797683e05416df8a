"""The run page's live part: the page polls with its run's key and gets 204 while nothing changed,
else the page again, from which htmx takes the parts that show the run (not the forms)."""

from __future__ import annotations

from uuid import UUID

from django.http import HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_safe

from console.htmx import HtmxHttpRequest
from console.live import run_actions_key, run_live_key
from console.roles import ENGINEER, role_required, run_for_user
from console.views.engineer import run_page_context


@role_required(ENGINEER)
@require_safe
def run_live(request: HtmxHttpRequest, run_id: UUID) -> HttpResponse:
    run = run_for_user(request.user, run_id)
    if request.GET.get("key") == run_live_key(run):
        return HttpResponse(status=204)
    context = {**run_page_context(request, run), "live_update": True}
    response = render(request, "console/engineer/run_detail.html", context)
    if request.GET.get("actions") != run_actions_key(run):  # the actions' part fetches itself again
        response["HX-Trigger"] = "keeper-run-actions-changed"
    return response
