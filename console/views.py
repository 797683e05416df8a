"""Console pages. For now: the run overview (the support, compliance and engineer screens follow)."""

from __future__ import annotations

from django.contrib.admin.views.decorators import staff_member_required
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from runs.models import AgentRun, RunStatus
from runs.selectors import run_list


@staff_member_required
def home(request: HttpRequest) -> HttpResponse:
    status = request.GET.get("status") or None
    if status not in {s.value for s in RunStatus}:
        status = None
    counts = dict(
        AgentRun.objects.values_list("status").annotate(n=Count("run_id")).values_list("status", "n")
    )
    context = {
        "counts": [(s.value, counts.get(s.value, 0)) for s in RunStatus],
        "runs": run_list(status=status)[:50],
        "status": status,
    }
    return render(request, "console/home.html", context)
