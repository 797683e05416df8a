"""The run timeline: a server-drawn SVG of a run's activity along time with its notable events marked
(crashes and lease take-overs, resume checks, approvals, errors, suspensions, human actions).

Pure: events (and optionally pre-aggregated activity buckets) in, escaped SVG markup out. Every piece
of text goes through `format_html`, so an event type or actor can never inject markup.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH, LEFT, RIGHT = 1000, 150, 16
ACTIVITY_TOP, ACTIVITY_HEIGHT, LANE_HEIGHT = 8, 44, 20
TOOLTIP_CHARS = 160  # of one field in a tooltip
DEFAULT_BUCKETS = 120


@dataclass(frozen=True)
class TimelineEvent:
    seq: int
    event_type: str
    created_at: datetime
    actor: str = ""
    step_id: str = ""
    trigger: str = ""  # resume_verified / resume_refused: "resume_request" or "lease_takeover"
    reason: str = ""  # run_suspended: the suspend reason code


@dataclass(frozen=True)
class Bucket:
    """Events committed in one slice of time (aggregated in SQL for big runs)."""

    start: datetime
    end: datetime
    first_seq: int
    last_seq: int
    count: int


@dataclass(frozen=True)
class MarkKind:
    key: str
    label: str
    color: str
    shape: str  # "circle", "diamond" or "square"


KINDS = (
    MarkKind("takeover", "crash / lease take-over", "#b42318", "diamond"),
    MarkKind("error", "step error / failure", "#dc6803", "square"),
    MarkKind("resume", "resume check", "#2457c5", "circle"),
    MarkKind("approval", "approval", "#7a5af8", "circle"),
    MarkKind("suspend", "suspension", "#b58105", "square"),
    MarkKind("human", "cancel / fork / rewind / reconcile", "#475467", "circle"),
    MarkKind("end", "completed", "#067647", "circle"),
)
KIND_BY_KEY = {kind.key: kind for kind in KINDS}

# Every event type that can become a mark: the page's query selects only these rows.
MARKED_EVENT_TYPES = (
    "resume_verified",
    "resume_refused",
    "resume_requested",
    "approval_requested",
    "approval_approved",
    "approval_rejected",
    "approval_expired",
    "run_suspended",
    "step_error",
    "run_failed",
    "run_cancelled",
    "run_forked",
    "run_superseded",
    "fork_expired",
    "operation_reconciled",
    "run_completed",
)
_HUMAN = frozenset({"run_cancelled", "run_forked", "run_superseded", "fork_expired", "operation_reconciled"})


def mark_kind(event: TimelineEvent) -> str | None:
    """Which lane an event is marked in, or None for plain progress (drawn as activity only)."""
    kind = event.event_type
    if kind in ("resume_verified", "resume_refused"):
        return "takeover" if event.trigger == "lease_takeover" else "resume"
    if kind == "resume_requested":
        return "resume"
    if kind.startswith("approval_"):
        return "approval"
    if kind == "run_suspended":
        return "approval" if event.reason.startswith("approval") else "suspend"
    if kind in ("step_error", "run_failed"):
        return "error"
    if kind in _HUMAN:
        return "human"
    if kind == "run_completed":
        return "end"
    return None


def buckets_of(events: Sequence[TimelineEvent], *, count: int = DEFAULT_BUCKETS) -> list[Bucket]:
    """Activity buckets of a list of events (the page gets them from SQL; tests and small runs here)."""
    if not events:
        return []
    start = min(e.created_at for e in events)
    span = (max(e.created_at for e in events) - start).total_seconds()
    slices: dict[int, list[TimelineEvent]] = {}
    for event in events:
        offset = (event.created_at - start).total_seconds()
        index = min(int(offset / span * count), count - 1) if span > 0 else 0
        slices.setdefault(index, []).append(event)
    return [
        Bucket(
            start=min(e.created_at for e in group),
            end=max(e.created_at for e in group),
            first_seq=min(e.seq for e in group),
            last_seq=max(e.seq for e in group),
            count=len(group),
        )
        for _, group in sorted(slices.items())
    ]


def _clip(text: str) -> str:
    return text if len(text) <= TOOLTIP_CHARS else text[: TOOLTIP_CHARS - 1] + "…"


def _time(moment: datetime) -> str:
    moment = moment.astimezone(UTC) if moment.tzinfo else moment
    return moment.strftime("%Y-%m-%d %H:%M:%S") + f".{moment.microsecond // 1000:03d}"


def _tick(moment: datetime, span: float) -> str:
    """An axis label only as precise as the span needs."""
    moment = moment.astimezone(UTC) if moment.tzinfo else moment
    if span >= 86400:
        return moment.strftime("%m-%d %H:%M")
    if span >= 10:
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%H:%M:%S") + f".{moment.microsecond // 1000:03d}"


def _shape(kind: MarkKind, x: float, y: float, size: float = 6.0) -> SafeString:
    if kind.shape == "diamond":
        points = (
            f"{x:.1f},{y - size:.1f} {x + size:.1f},{y:.1f} {x:.1f},{y + size:.1f} {x - size:.1f},{y:.1f}"
        )
        return format_html('<polygon points="{}" fill="{}">', points, kind.color)
    if kind.shape == "square":
        return format_html(
            '<rect x="{}" y="{}" width="{}" height="{}" fill="{}">',
            f"{x - size * 0.8:.1f}",
            f"{y - size * 0.8:.1f}",
            f"{size * 1.6:.1f}",
            f"{size * 1.6:.1f}",
            kind.color,
        )
    return format_html(
        '<circle cx="{}" cy="{}" r="{}" fill="{}">', f"{x:.1f}", f"{y:.1f}", f"{size * 0.8:.1f}", kind.color
    )


# Constant markup only (never data): the closing tags of the mark shapes.
_CLOSE = {
    "diamond": mark_safe("</polygon>"),
    "square": mark_safe("</rect>"),
    "circle": mark_safe("</circle>"),
}


def _tooltip(event: TimelineEvent) -> str:
    detail = event.trigger or event.reason
    parts = [
        f"#{event.seq} {_clip(event.event_type)}" + (f" ({_clip(detail)})" if detail else ""),
        _time(event.created_at),
    ]
    if event.step_id:
        parts.append(f"step {_clip(event.step_id)}")
    if event.actor:
        parts.append(f"by {_clip(event.actor)}")
    return " · ".join(parts)


def timeline_svg(
    *,
    events: Sequence[TimelineEvent],
    buckets: Sequence[Bucket] | None = None,
    link: Callable[[int], str] | None = None,
    hidden_marks: int = 0,
    label: str = "Run timeline",
) -> SafeString:
    """The SVG: an activity lane (bars of events per time slice), one lane per mark kind, a time
    axis and a legend. `events` need only hold the marked ones when `buckets` are given."""
    buckets = list(buckets) if buckets is not None else buckets_of(events)
    times = [b.start for b in buckets] + [b.end for b in buckets] + [e.created_at for e in events]
    if not times:
        return mark_safe('<p class="muted">No events yet.</p>')
    start, end = min(times), max(times)
    span = (end - start).total_seconds()
    plot = WIDTH - LEFT - RIGHT

    def x_of(moment: datetime) -> float:
        return LEFT + ((moment - start).total_seconds() / span * plot if span > 0 else plot / 2)

    lanes_top = ACTIVITY_TOP + ACTIVITY_HEIGHT + 8
    axis_y = lanes_top + LANE_HEIGHT * len(KINDS) + 4
    legend_y = axis_y + 38
    height = legend_y + 20 * ((len(KINDS) + 3) // 4) + 8
    parts: list[SafeString] = [
        format_html(
            '<svg class="timeline" role="img" aria-label="{}" viewBox="0 0 {} {}" width="100%" '
            'preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg"><title>{}</title>',
            label,
            WIDTH,
            height,
            label,
        ),
        format_html('<text x="4" y="{}">activity (events)</text>', ACTIVITY_TOP + ACTIVITY_HEIGHT / 2 + 4),
    ]
    tallest = max((b.count for b in buckets), default=1) or 1
    for b in buckets:
        bar_h = max(2.0, b.count / tallest * ACTIVITY_HEIGHT)
        x0, x1 = x_of(b.start), x_of(b.end)
        seqs = f"#{b.first_seq}" if b.first_seq == b.last_seq else f"#{b.first_seq}–{b.last_seq}"
        parts.append(
            format_html(
                '<rect class="activity" x="{}" y="{}" width="{}" height="{}" fill="#94a3b8">'
                "<title>{} · {} event{} · {} – {}</title></rect>",
                f"{min(x0, WIDTH - RIGHT - 3):.1f}",
                f"{ACTIVITY_TOP + ACTIVITY_HEIGHT - bar_h:.1f}",
                f"{max(3.0, x1 - x0):.1f}",
                f"{bar_h:.1f}",
                seqs,
                b.count,
                "" if b.count == 1 else "s",
                _time(b.start),
                _time(b.end),
            )
        )
    for index, kind in enumerate(KINDS):
        y = lanes_top + LANE_HEIGHT * index + LANE_HEIGHT / 2
        parts.append(
            format_html(
                '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#e3e6ea"></line><text x="4" y="{}">{}</text>',
                LEFT,
                WIDTH - RIGHT,
                f"{y:.1f}",
                f"{y:.1f}",
                f"{y + 4:.1f}",
                kind.label,
            )
        )
    lane_of = {kind.key: index for index, kind in enumerate(KINDS)}
    for event in events:
        key = mark_kind(event)
        if key is None:
            continue
        kind = KIND_BY_KEY[key]
        y = lanes_top + LANE_HEIGHT * lane_of[key] + LANE_HEIGHT / 2
        mark = format_html(
            "{}<title>{}</title>{}",
            _shape(kind, x_of(event.created_at), y),
            _tooltip(event),
            _CLOSE[kind.shape],
        )
        if link is not None:
            mark = format_html('<a href="{}" class="mark mark-{}">{}</a>', link(event.seq), key, mark)
        else:
            mark = format_html('<g class="mark mark-{}">{}</g>', key, mark)
        parts.append(mark)
    parts.append(
        format_html(
            '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#5b6472"></line>',
            LEFT,
            WIDTH - RIGHT,
            axis_y,
            axis_y,
        )
    )
    for step in range(5):
        moment = start + (end - start) * step / 4
        anchor = "start" if step == 0 else "end" if step == 4 else "middle"
        parts.append(
            format_html(
                '<line x1="{0}" x2="{0}" y1="{1}" y2="{2}" stroke="#5b6472"></line>'
                '<text x="{0}" y="{3}" text-anchor="{4}">{5}</text>',
                f"{x_of(moment):.1f}",
                axis_y,
                axis_y + 4,
                axis_y + 16,
                anchor,
                _tick(moment, span),
            )
        )
    parts.append(format_html('<text x="4" y="{}">time (UTC), {} s</text>', axis_y + 16, f"{span:.1f}"))
    parts.append(
        format_html_join(
            "",
            "{}",
            (
                (
                    format_html(
                        '<g class="legend">{}</g>',
                        format_html(
                            '{}<title>{}</title>{}<text x="{}" y="{}">{}</text>',
                            _shape(kind, 12 + 245 * (i % 4), legend_y + 20 * (i // 4) - 4, 5),
                            kind.label,
                            _CLOSE[kind.shape],
                            22 + 245 * (i % 4),
                            legend_y + 20 * (i // 4),
                            kind.label,
                        ),
                    ),
                )
                for i, kind in enumerate(KINDS)
            ),
        )
    )
    if hidden_marks:
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="end">{} older marks not drawn</text>',
                WIDTH - RIGHT,
                height - 6,
                hidden_marks,
            )
        )
    parts.append(mark_safe("</svg>"))
    return format_html_join("", "{}", ((p,) for p in parts))
