"""Charts of the user's tenants over the last hour or day, drawn server-side as SVG (no script, no
CDN): runs started, completed, failed and suspended per slice of time, step latency percentiles,
and the approvals waiting with their age. The figures are those /metrics exports (the runs' events,
the steps' wall time, pending approvals), read per tenant here under row-level security."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from console.timeline import duration_text, ticks
from runs.kernel.models import Approval, ApprovalStatus

WINDOWS = {"hour": (timedelta(hours=1), 60), "day": (timedelta(days=1), 15 * 60)}  # span, slice seconds
SERIES = (
    ("run_started", "started", "#2457c5"),
    ("run_completed", "completed", "#067647"),
    ("run_failed", "failed", "#b42318"),
    ("run_suspended", "suspended", "#0e7490"),
)
PERCENTILES = (("p50", "#2457c5"), ("p90", "#b58105"), ("p99", "#b42318"))
STEP_TYPES = (
    "step_completed",
    "assistant_message",
    "tool_call",
    "step_error",
    "run_suspended",
    "run_completed",
    "run_failed",
)

# Events of runs touched in the window only (agent_runs' (tenant, updated_at) index). A run's
# updated_at lags its newest event by under a second (a step commit in the same status moves it at
# most once a second: runs.kernel), so the runs are those updated from a second before the window.
_COUNTS_SQL = """
SELECT floor(extract(epoch FROM e.created_at - %(start)s) / %(slice)s)::int AS b,
       CASE WHEN e.event_type = 'step_error' THEN 'run_suspended' ELSE e.event_type END, count(*)
  FROM agent_events e
 WHERE e.run_id IN (SELECT run_id FROM agent_runs WHERE tenant_id = ANY(%(tenants)s) AND updated_at >= %(start)s - interval '1 second'
                     AND NOT replay)
   AND e.created_at >= %(start)s
   AND (e.event_type = ANY(%(types)s) OR (e.event_type = 'step_error' AND e.payload ? 'reason'))
 GROUP BY 1, 2
"""  # a step error that used up its attempts suspends the run: its event has a reason, no retry
_LATENCY_SQL = """
SELECT floor(extract(epoch FROM e.created_at - %(start)s) / %(slice)s)::int AS b,
       percentile_cont(ARRAY[0.5, 0.9, 0.99]) WITHIN GROUP (ORDER BY (e.payload #>> '{spent,wall_s}')::float),
       count(*)
  FROM agent_events e
 WHERE e.run_id IN (SELECT run_id FROM agent_runs WHERE tenant_id = ANY(%(tenants)s) AND updated_at >= %(start)s - interval '1 second'
                     AND NOT replay)
   AND e.created_at >= %(start)s AND e.event_type = ANY(%(steps)s) AND e.step_id IS NOT NULL
   AND jsonb_typeof(e.payload #> '{spent,wall_s}') = 'number'
 GROUP BY 1
"""


@dataclass
class Charts:
    window: str
    start: datetime
    end: datetime
    slice_s: int
    counts: dict[str, list[int]]  # event type -> per slice
    latency: dict[str, list[float | None]]  # p50/p90/p99 -> per slice (seconds)
    steps: int
    approvals_waiting: int
    approval_ages: list[float]  # seconds, oldest first

    @property
    def totals(self) -> dict[str, int]:
        return {kind: sum(values) for kind, values in self.counts.items()}


def charts_data(*, tenant_ids: Sequence[UUID], window: str, now: datetime) -> Charts:
    span, slice_s = WINDOWS[window]
    start = now - span
    n = int(span.total_seconds() // slice_s)
    counts = {kind: [0] * n for kind, _, _ in SERIES}
    latency: dict[str, list[float | None]] = {name: [None] * n for name, _ in PERCENTILES}
    params: dict[str, Any] = {
        "start": start,
        "slice": slice_s,
        "tenants": list(tenant_ids),
        "types": [k for k, _, _ in SERIES],
    }
    steps = 0
    with connection.cursor() as cursor:
        cursor.execute(_COUNTS_SQL, params)
        for bucket, kind, count in cursor.fetchall():
            if 0 <= bucket < n:
                counts[kind][bucket] = count
        cursor.execute(_LATENCY_SQL, {**params, "steps": list(STEP_TYPES)})
        for bucket, values, count in cursor.fetchall():
            if 0 <= bucket < n and values:
                steps += count
                for (name, _), value in zip(PERCENTILES, values, strict=True):
                    latency[name][bucket] = float(value)
    pending = Approval.objects.filter(tenant_id__in=list(tenant_ids), status=ApprovalStatus.PENDING)
    ages = sorted(
        ((now - c).total_seconds() for c in pending.values_list("created_at", flat=True)), reverse=True
    )
    return Charts(
        window=window,
        start=start,
        end=now,
        slice_s=slice_s,
        counts=counts,
        latency=latency,
        steps=steps,
        approvals_waiting=len(ages),
        approval_ages=ages,
    )


W, H, LEFT, RIGHT, TOP, BOTTOM = 640, 200, 76, 12, 10, 34  # LEFT holds a label like "1.254 s"


def line_chart(
    *,
    series: Sequence[tuple[str, str, Sequence[float | None]]],
    start: datetime,
    slice_s: int,
    label: str,
    unit: str,
) -> SafeString:
    """Lines (one per series: name, color, a value per slice; None is a gap) over time, with a value
    axis from zero, round time ticks and a legend; every value is in a tooltip of its point."""
    n = max((len(values) for _, _, values in series), default=0)
    if n == 0:
        return mark_safe('<p class="muted">No data.</p>')
    top = max((v for _, _, values in series for v in values if v is not None), default=0) or 1
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def x_of(i: float) -> float:
        return LEFT + (i + 0.5) / n * plot_w

    def y_of(v: float) -> float:
        return TOP + plot_h - v / top * plot_h

    parts = [
        format_html(
            '<svg class="chart" role="img" aria-label="{}" viewBox="0 0 {} {}" width="100%" '
            'xmlns="http://www.w3.org/2000/svg"><title>{}</title>',
            label,
            W,
            H + 18,
            label,
        )
    ]
    for fraction in (0, 0.5, 1):
        y = y_of(top * fraction)
        value = top * fraction
        text = duration_text(value) if unit == "s" else f"{value:g}"
        parts.append(
            mark_safe(
                f'<line x1="{LEFT}" x2="{W - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#e3e6ea"></line>'
                f'<text x="{LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">{escape(text)}</text>'
            )
        )
    end = start + timedelta(seconds=slice_s * n)
    step, moments = ticks(start, end)
    for moment in moments:
        x = LEFT + (moment - start).total_seconds() / (slice_s * n) * plot_w
        stamp = moment.strftime("%H:%M") if step >= 60 else moment.strftime("%H:%M:%S")
        parts.append(
            mark_safe(
                f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP + plot_h}" y2="{TOP + plot_h + 4}" stroke="#5b6472"></line>'
                f'<text class="tick-label" x="{x:.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{stamp}</text>'
            )
        )
    for index, (name, color, values) in enumerate(series):
        points = [(x_of(i), y_of(v), i, v) for i, v in enumerate(values) if v is not None]
        if len(points) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in points)
            parts.append(
                mark_safe(
                    f'<polyline class="series series-{escape(name)}" points="{path}" fill="none" stroke="{color}" stroke-width="1.5"></polyline>'
                )
            )
        for x, y, i, v in points:
            if v or len(points) < 2:
                at = (start + timedelta(seconds=slice_s * i)).strftime("%H:%M")
                shown = duration_text(v) if unit == "s" else f"{v:g}"
                parts.append(
                    mark_safe(
                        f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="2" fill="{color}">'
                        f"<title>{escape(name)} {escape(shown)} at {at} UTC</title></circle>"
                    )
                )
        lx = LEFT + 110 * index
        parts.append(
            mark_safe(
                f'<g class="legend"><rect x="{lx}" y="{H + 6}" width="12" height="8" fill="{color}"></rect>'
                f'<text x="{lx + 16}" y="{H + 14}">{escape(name)}</text></g>'
            )
        )
    parts.append(mark_safe("</svg>"))
    return mark_safe("".join(parts))


def age_bars(*, ages: Sequence[float], label: str) -> SafeString:
    """Approvals waiting by age: how many under 5 min, 1 h, 8 h, 24 h, and older."""
    edges = (
        (300, "< 5 min"),
        (3600, "< 1 h"),
        (8 * 3600, "< 8 h"),
        (86400, "< 24 h"),
        (float("inf"), "older"),
    )
    counts = [0] * len(edges)
    for age in ages:
        counts[next(i for i, (edge, _) in enumerate(edges) if age < edge)] += 1
    tallest = max(counts) or 1
    rows = []
    for i, ((_, name), count) in enumerate(zip(edges, counts, strict=True)):
        width = count / tallest * 300
        rows.append(
            f'<g class="age age-{i}"><text x="0" y="{18 + 24 * i}">{escape(name)}</text>'
            f'<rect x="70" y="{6 + 24 * i}" width="{width:.1f}" height="16" fill="#7a5af8"></rect>'
            f'<text x="{76 + width:.1f}" y="{18 + 24 * i}">{count}</text></g>'
        )
    return mark_safe(
        f'<svg class="chart ages" role="img" aria-label="{escape(label)}" viewBox="0 0 420 {24 * len(edges) + 6}" '
        f'width="100%" xmlns="http://www.w3.org/2000/svg"><title>{escape(label)}</title>{"".join(rows)}</svg>'
    )
