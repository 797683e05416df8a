"""The timeline drawing: which events are marked in which lane, the SVG's parts, and escaping."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from console.timeline import KINDS, MARKED_EVENT_TYPES, TimelineEvent, buckets_of, mark_kind, timeline_svg

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def event(seq, event_type, seconds=None, **extra):
    return TimelineEvent(
        seq=seq,
        event_type=event_type,
        created_at=T0 + timedelta(seconds=seq if seconds is None else seconds),
        **extra,
    )


def test_events_are_marked_by_what_they_mean():
    assert mark_kind(event(1, "step_completed")) is None
    assert mark_kind(event(1, "run_started")) is None
    assert mark_kind(event(1, "resume_verified", trigger="lease_takeover")) == "takeover"
    assert mark_kind(event(1, "resume_refused", trigger="lease_takeover")) == "takeover"
    assert mark_kind(event(1, "resume_verified", trigger="resume_request")) == "resume"
    assert mark_kind(event(1, "resume_refused", trigger="resume_request")) == "resume"
    assert mark_kind(event(1, "resume_requested")) == "resume"
    assert mark_kind(event(1, "approval_approved")) == "approval"
    assert mark_kind(event(1, "approval_rejected")) == "approval"
    assert mark_kind(event(1, "run_suspended", reason="approval_required")) == "approval"
    assert mark_kind(event(1, "run_suspended", reason="reconciliation_required")) == "suspend"
    assert mark_kind(event(1, "step_error")) == "error" and mark_kind(event(1, "run_failed")) == "error"
    for human in ("run_cancelled", "run_forked", "run_superseded", "operation_reconciled"):
        assert mark_kind(event(1, human)) == "human"
    assert mark_kind(event(1, "run_completed")) == "end"


def test_every_markable_event_type_is_selected_by_the_page_query():
    samples = [
        "resume_verified",
        "resume_refused",
        "resume_requested",
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
    ]
    for kind in samples:
        assert mark_kind(event(1, kind)) is not None and kind in MARKED_EVENT_TYPES


def test_the_svg_has_activity_bars_a_mark_with_a_tooltip_per_marked_event_and_a_legend():
    events = [
        event(1, "run_started"),
        event(2, "step_completed"),
        event(3, "step_error", step_id="refund"),
        event(20, "resume_verified", trigger="lease_takeover", actor="worker-2"),
        event(21, "step_completed"),
        event(60, "run_completed"),
    ]
    svg = str(timeline_svg(events=events, link=lambda seq: f"?after_seq={seq - 1}#seq-{seq}"))
    assert svg.startswith('<svg class="timeline"') and svg.endswith("</svg>")
    assert svg.count('class="activity"') == len(buckets_of(events))
    marks = re.findall(r'<a href="([^"]+)" class="mark mark-(\w+)">', svg)
    assert [kind for _, kind in marks] == ["error", "takeover", "end"]
    assert marks[1][0] == "?after_seq=19#seq-20"
    assert "#20 resume_verified (lease_takeover) · 2026-03-01 12:00:20.000 · by worker-2" in svg
    assert "#3 step_error · 2026-03-01 12:00:03.000 · step refund" in svg
    # every kind has its lane, labelled (short) with the full meaning as its tooltip
    assert all(f">{kind.lane}<title>{kind.label}</title></text>" in svg for kind in KINDS)
    assert ">12:00:10</text>" in svg and ">12:01:00</text>" in svg  # round ticks on the time axis


def test_text_in_the_svg_is_escaped_and_clipped():
    hostile = "<script>alert(1)</script>"
    events = [
        event(1, "run_suspended", actor=hostile + "x" * 5000, reason="<img src=x onerror=alert(2)>"),
        event(2, hostile),
    ]
    svg = str(timeline_svg(events=events, label=f"run {hostile}"))
    assert "<script>" not in svg and "<img" not in svg
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svg and "&lt;img src=x" in svg
    assert "x" * 200 not in svg  # a 5,000-character actor is clipped in the tooltip


def test_buckets_count_events_per_slice_of_time():
    events = [event(seq, "step_completed", seconds=seq // 10) for seq in range(1, 101)]
    buckets = buckets_of(events, count=10)
    assert sum(b.count for b in buckets) == 100
    assert buckets[0].first_seq == 1 and buckets[-1].last_seq == 100
    assert all(b.first_seq <= b.last_seq and b.start <= b.end for b in buckets)


def test_edge_cases_no_events_one_instant_and_hidden_marks():
    assert "No events yet" in str(timeline_svg(events=[]))
    same = [event(seq, "step_error", seconds=0) for seq in range(1, 4)]
    svg = str(timeline_svg(events=same, hidden_marks=7))
    assert svg.count('class="mark mark-error"') == 3 and "7 older marks not drawn" in svg
    assert "nan" not in svg.lower()


def test_a_suspended_step_is_drawn_in_a_colour_far_from_a_failed_or_erring_one() -> None:
    """Waiting is not failing: the two must not be told apart by a shade (an outside tester could not)."""
    from console.timeline import STEP_COLORS

    def rgb(color: str) -> tuple[int, ...]:
        return tuple(int(color[i : i + 2], 16) for i in (1, 3, 5))

    suspended = rgb(STEP_COLORS["suspended"])
    for other in ("failed", "error"):
        distance = sum((a - b) ** 2 for a, b in zip(suspended, rgb(STEP_COLORS[other]), strict=True)) ** 0.5
        assert distance > 150, (other, distance)
