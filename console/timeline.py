"""The run timeline: a server-drawn SVG of a run along time: events per slice, each step's execution
as a bar (its duration; failed attempts and their retry waits), the run's waits (suspensions, an
approval's too), and its notable events marked in labelled lanes, over a time axis with round ticks.

Pure: events (and optionally pre-aggregated activity buckets) in, escaped SVG markup out. Every piece
of text goes through `format_html`, so an event type or actor can never inject markup.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from django.utils.html import escape, format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

WIDTH, LEFT, RIGHT = 1000, 118, 16  # lane labels end at LEFT - LABEL_GAP, right-aligned
LABEL_GAP = 8
ACTIVITY_TOP, ACTIVITY_HEIGHT, LANE_HEIGHT, BAR_HEIGHT = 8, 40, 20, 12
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
class StepBar:
    """One execution of a step: from `start` (its event's time less the wall time it spent) to `end`
    (its event's commit). `outcome` is completed, error, suspended or failed; `retry_until` is the end
    of the wait before the next attempt (a failed attempt the engine retries)."""

    seq: int
    step_id: str
    attempt: int
    start: datetime
    end: datetime
    outcome: str
    detail: str = ""
    retry_until: datetime | None = None


@dataclass(frozen=True)
class Wait:
    """A time the run waited: suspended (for an approval, a person, a reconcile) from `start` until
    the next event, or until now (`ongoing`)."""

    seq: int
    start: datetime
    end: datetime
    reason: str
    ongoing: bool = False


@dataclass(frozen=True)
class MarkKind:
    key: str
    label: str  # the lane's tooltip
    color: str
    shape: str  # "circle", "diamond" or "square"
    lane: str = ""  # the lane's label (short: it must end before the plot starts)


KINDS = (
    MarkKind("takeover", "crash / lease take-over", "#b42318", "diamond", "take-over"),
    MarkKind("error", "step error / failure", "#dc6803", "square", "error"),
    MarkKind("resume", "resume check", "#2457c5", "circle", "resume check"),
    MarkKind("approval", "approval", "#7a5af8", "circle", "approval"),
    MarkKind("suspend", "suspension", "#0e7490", "square", "suspension"),
    MarkKind("human", "cancel / fork / rewind / reconcile", "#475467", "circle", "people"),
    MarkKind("end", "completed", "#067647", "circle", "completed"),
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


def _tick(moment: datetime, step: float) -> str:
    """An axis label only as precise as the tick interval needs."""
    moment = moment.astimezone(UTC) if moment.tzinfo else moment
    if step >= 86400:
        return moment.strftime("%m-%d")
    if step >= 3600:
        return moment.strftime("%m-%d %H:%M")
    if step >= 60:
        return moment.strftime("%H:%M")
    if step >= 1:
        return moment.strftime("%H:%M:%S")
    return moment.strftime("%H:%M:%S") + f".{moment.microsecond // 1000:03d}"


# Round tick intervals (seconds): the axis takes the smallest that gives at most MAX_TICKS ticks.
TICK_STEPS = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    10800,
    21600,
    43200,
    86400,
    172800,
    604800,
    2592000,
)
MAX_TICKS = 8


def ticks(start: datetime, end: datetime) -> tuple[float, list[datetime]]:
    """The tick interval (seconds) and the round moments (multiples of it, UTC) inside [start, end]."""
    span = (end - start).total_seconds()
    step = next((t for t in TICK_STEPS if span / t <= MAX_TICKS), TICK_STEPS[-1])
    first = math.ceil(start.timestamp() / step - 1e-9) * step
    moments: list[datetime] = []
    at = first
    while at <= end.timestamp() + 1e-9 and len(moments) <= MAX_TICKS + 1:
        moments.append(datetime.fromtimestamp(at, tz=UTC))
        at = round(at + step, 6)
    return step, moments


def duration_text(seconds: float) -> str:
    """1.234 s, 2 min 5 s, 3 h 10 min: as precise as a person reads it."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 10:
        return f"{seconds:.3f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes} min {secs} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes} min"
    return f"{hours // 24} d {hours % 24} h"


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


STEP_COLORS = {"completed": "#2457c5", "error": "#dc6803", "suspended": "#0e7490", "failed": "#b42318"}
RETRY_COLOR, WAIT_COLOR, ACTIVITY_COLOR, GRID_COLOR = "#fcd9b6", "#f5d88a", "#94a3b8", "#eef0f3"
# The legend explains the bars (the lanes name themselves): (color, text).
LEGEND = (
    (ACTIVITY_COLOR, "events committed per slice of time"),
    (STEP_COLORS["completed"], "a step ran (bar = its duration)"),
    (STEP_COLORS["error"], "a step attempt failed"),
    (RETRY_COLOR, "waiting to retry"),
    (WAIT_COLOR, "run waiting (suspended)"),
)


def _lane_label(y: float, text: str, title: str) -> SafeString:
    return format_html(
        '<text class="lane-label" x="{}" y="{}" text-anchor="end">{}<title>{}</title></text>',
        LEFT - LABEL_GAP,
        f"{y + 4:.1f}",
        text,
        title,
    )


def _bar(css: str, x0: float, x1: float, y: float, height: float, color: str, tooltip: str) -> SafeString:
    # Hundreds of these per page: one escape of the text, the numbers formatted here (no markup).
    x0 = min(max(x0, LEFT), WIDTH - RIGHT - 2)
    width = max(2.0, min(x1, WIDTH - RIGHT) - x0)
    return mark_safe(  # css and color: this module's constants; the tooltip is escaped
        f'<rect class="{css}" x="{x0:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}" '
        f'fill="{color}"><title>{escape(tooltip)}</title></rect>'
    )


def _step_tooltip(bar: StepBar) -> str:
    took = (bar.end - bar.start).total_seconds()
    text = f"#{bar.seq} step {_clip(bar.step_id)} · attempt {bar.attempt} · {duration_text(took)} · {bar.outcome}"
    if bar.detail:
        text += f": {_clip(bar.detail)}"
    return f"{text} · ended {_time(bar.end)}"


def timeline_svg(
    *,
    events: Sequence[TimelineEvent],
    buckets: Sequence[Bucket] | None = None,
    steps: Sequence[StepBar] = (),
    waits: Sequence[Wait] = (),
    link: Callable[[int], str] | None = None,
    hidden_marks: int = 0,
    hidden_steps: bool = False,
    label: str = "Run timeline",
) -> SafeString:
    """The SVG: an activity band (events per time slice), a steps lane (each execution a bar, failed
    attempts and retry waits), the run's lane (its waits), one lane per mark kind, a time axis with
    round ticks and a legend of the bars. `events` need only hold the marked ones when `buckets` are
    given. Lane labels end before the plot starts (right-aligned)."""
    buckets = list(buckets) if buckets is not None else buckets_of(events)
    times = [b.start for b in buckets] + [b.end for b in buckets] + [e.created_at for e in events]
    times += (
        [s.start for s in steps] + [s.end for s in steps] + [s.retry_until for s in steps if s.retry_until]
    )
    times += [w.start for w in waits] + [w.end for w in waits]
    if not times:
        return mark_safe('<p class="muted">No events yet.</p>')
    start, end = min(times), max(times)
    span = (end - start).total_seconds()
    plot = WIDTH - LEFT - RIGHT

    def x_of(moment: datetime) -> float:
        return LEFT + ((moment - start).total_seconds() / span * plot if span > 0 else plot / 2)

    steps_y = ACTIVITY_TOP + ACTIVITY_HEIGHT + 6
    run_y = steps_y + LANE_HEIGHT
    lanes_top = run_y + LANE_HEIGHT
    axis_y = lanes_top + LANE_HEIGHT * len(KINDS) + 4
    legend_y = axis_y + 52
    height = legend_y + 20 * ((len(LEGEND) + 2) // 3) + 8
    parts: list[SafeString] = [
        format_html(
            '<svg class="timeline" role="img" aria-label="{}" viewBox="0 0 {} {}" width="100%" '
            'preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg"><title>{}</title>',
            label,
            WIDTH,
            height,
            label,
        ),
    ]
    tick_step, tick_moments = ticks(start, end) if span > 0 else (1.0, [start])
    for moment in tick_moments:  # the grid first, under everything
        parts.append(
            format_html(
                '<line class="grid" x1="{0}" x2="{0}" y1="{1}" y2="{2}" stroke="{3}"></line>',
                f"{x_of(moment):.1f}",
                ACTIVITY_TOP,
                axis_y,
                GRID_COLOR,
            )
        )
    parts.append(
        _lane_label(ACTIVITY_TOP + ACTIVITY_HEIGHT / 2, "events", "events committed per slice of time")
    )
    tallest = max((b.count for b in buckets), default=1) or 1
    for b in buckets:
        bar_h = max(2.0, b.count / tallest * ACTIVITY_HEIGHT)
        seqs = f"#{b.first_seq}" if b.first_seq == b.last_seq else f"#{b.first_seq}–{b.last_seq}"
        tooltip = f"{seqs} · {b.count} event{'' if b.count == 1 else 's'} · {_time(b.start)} – {_time(b.end)}"
        parts.append(
            _bar(
                "activity",
                x_of(b.start),
                x_of(b.end),
                ACTIVITY_TOP + ACTIVITY_HEIGHT - bar_h,
                bar_h,
                ACTIVITY_COLOR,
                tooltip,
            )
        )

    bar_top = (LANE_HEIGHT - BAR_HEIGHT) / 2
    parts.append(_lane_label(steps_y + LANE_HEIGHT / 2, "steps", "each step's execution: bar = duration"))
    for bar in steps:
        if bar.retry_until is not None and bar.retry_until > bar.end:
            wait_s = (bar.retry_until - bar.end).total_seconds()
            parts.append(
                _bar(
                    "retry-wait",
                    x_of(bar.end),
                    x_of(bar.retry_until),
                    steps_y + bar_top,
                    BAR_HEIGHT,
                    RETRY_COLOR,
                    f"waiting {duration_text(wait_s)} to retry step {_clip(bar.step_id)} (after attempt {bar.attempt})",
                )
            )
        drawn = _bar(
            f"step step-{bar.outcome}",
            x_of(bar.start),
            x_of(bar.end),
            steps_y + bar_top,
            BAR_HEIGHT,
            STEP_COLORS.get(bar.outcome, "#475467"),
            _step_tooltip(bar),
        )
        parts.append(
            mark_safe(f'<a href="{escape(link(bar.seq))}">{drawn}</a>') if link is not None else drawn
        )
    parts.append(
        _lane_label(run_y + LANE_HEIGHT / 2, "run waiting", "the run's waits: suspended until it moved on")
    )
    for wait in waits:
        took = duration_text((wait.end - wait.start).total_seconds())
        tooltip = f"#{wait.seq} suspended ({_clip(wait.reason)}) · {took}" + (
            " so far, still waiting" if wait.ongoing else f" · until {_time(wait.end)}"
        )
        parts.append(
            _bar(
                "wait" + (" ongoing" if wait.ongoing else ""),
                x_of(wait.start),
                x_of(wait.end),
                run_y + bar_top,
                BAR_HEIGHT,
                WAIT_COLOR,
                tooltip,
            )
        )

    for index, kind in enumerate(KINDS):
        y = lanes_top + LANE_HEIGHT * index + LANE_HEIGHT / 2
        parts.append(
            format_html(
                '<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="#e3e6ea"></line>{}',
                LEFT,
                WIDTH - RIGHT,
                f"{y:.1f}",
                f"{y:.1f}",
                _lane_label(y, kind.lane or kind.label, kind.label),
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
    for moment in tick_moments:
        x = x_of(moment)
        anchor = "start" if x < LEFT + 30 else "end" if x > WIDTH - RIGHT - 30 else "middle"
        parts.append(
            format_html(
                '<line class="tick" x1="{0}" x2="{0}" y1="{1}" y2="{2}" stroke="#5b6472"></line>'
                '<text class="tick-label" x="{0}" y="{3}" text-anchor="{4}">{5}</text>',
                f"{x:.1f}",
                axis_y,
                axis_y + 4,
                axis_y + 16,
                anchor,
                _tick(moment, tick_step),
            )
        )
    parts.append(
        format_html(
            '<text x="{}" y="{}" text-anchor="end">UTC</text><text class="span" x="{}" y="{}" text-anchor="end">'
            "{} in all · ticks every {}</text>",
            LEFT - LABEL_GAP,
            axis_y + 16,
            WIDTH - RIGHT,
            axis_y + 30,
            duration_text(span),
            f"{tick_step * 1000:g} ms"
            if tick_step < 1
            else f"{tick_step:g} s"
            if tick_step < 60
            else duration_text(tick_step),
        )
    )
    for i, (color, text) in enumerate(LEGEND):
        x, y = LEFT + 290 * (i % 3), legend_y + 20 * (i // 3)
        parts.append(
            format_html(
                '<g class="legend"><rect x="{}" y="{}" width="14" height="10" fill="{}"></rect>'
                '<text x="{}" y="{}">{}</text></g>',
                x,
                y - 9,
                color,
                x + 20,
                y,
                text,
            )
        )
    notes = []
    if hidden_marks:
        notes.append(f"{hidden_marks} older marks not drawn")
    if hidden_steps:
        notes.append("older step executions not drawn")
    if notes:
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="end">{}</text>', WIDTH - RIGHT, height - 6, "; ".join(notes)
            )
        )
    parts.append(mark_safe("</svg>"))
    return format_html_join("", "{}", ((p,) for p in parts))
