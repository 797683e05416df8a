"""Charts for engineers: runs per slice of time, step latency percentiles, approvals waiting and
their age, over the last hour or day, for the user's tenants (server-drawn SVG, see console/charts.py)."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_safe

from console.charts import PERCENTILES, SERIES, WINDOWS, age_bars, charts_data, line_chart
from console.htmx import HtmxHttpRequest
from console.roles import ENGINEER, role_required, tenant_ids_for_user
from console.timeline import duration_text


@role_required(ENGINEER)
@require_safe
def charts(request: HtmxHttpRequest) -> HttpResponse:
    window = request.GET.get("window", "hour")
    if window not in WINDOWS:
        return render(
            request,
            "console/engineer/charts.html",
            {"error": f"window must be one of: {', '.join(WINDOWS)}", "windows": list(WINDOWS)},
            status=422,
        )
    data = charts_data(tenant_ids=tenant_ids_for_user(request.user), window=window, now=timezone.now())
    per = "minute" if data.slice_s == 60 else f"{data.slice_s // 60} minutes"
    context = {
        "windows": list(WINDOWS),
        "window": window,
        "data": data,
        "per": per,
        "runs_chart": line_chart(
            series=[(name, color, data.counts[kind]) for kind, name, color in SERIES],
            start=data.start,
            slice_s=data.slice_s,
            label=f"Runs started, completed, failed and suspended per {per}",
            unit="",
        ),
        "latency_chart": line_chart(
            series=[(name, color, data.latency[name]) for name, color in PERCENTILES],
            start=data.start,
            slice_s=data.slice_s,
            label=f"Step latency percentiles per {per}",
            unit="s",
        ),
        "ages_chart": age_bars(ages=data.approval_ages, label="Approvals waiting by age"),
        "oldest_approval": duration_text(data.approval_ages[0]) if data.approval_ages else "",
        "totals": [(name, data.totals[kind], color) for kind, name, color in SERIES],
    }
    return render(request, "console/engineer/charts.html", context)
