"""The timeline's layout: lane labels end before the plot, the legend explains the
bars instead of repeating the lanes, steps are bars with durations, failed attempts and retry waits,
a suspension (an approval's too) is a wait on the run's lane, and the time axis has round ticks."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from console.steps import run_steps
from console.timeline import (
    LABEL_GAP,
    LEFT,
    LEGEND,
    StepBar,
    TimelineEvent,
    Wait,
    ticks,
    timeline_svg,
)
from runs.engine.runs import run_resume, run_start, run_suspend
from runs.engine.steps import run_advance

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
CHAR_PX = 7  # a generous width of one character of the 11 px labels


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _svg(**extra) -> str:
    events = [
        TimelineEvent(1, "run_started", at(0)),
        TimelineEvent(5, "run_suspended", at(10), reason="approval_required"),
        TimelineEvent(6, "approval_approved", at(40), actor="user:support"),
        TimelineEvent(9, "run_completed", at(59)),
    ]
    steps = [
        StepBar(2, "lookup", 1, at(1), at(3.5), "error", "RuntimeError: boom", retry_until=at(5)),
        StepBar(3, "lookup", 2, at(5), at(6.25), "completed"),
        StepBar(4, "approve", 1, at(9.9), at(10), "suspended", "approval_required"),
    ]
    waits = [Wait(5, at(10), at(40), "approval_required")]
    return str(timeline_svg(events=events, steps=steps, waits=waits, **extra))


def test_lane_labels_end_before_the_plot_starts():
    labels = re.findall(
        r'<text class="lane-label" x="([\d.]+)" y="[\d.]+" text-anchor="(\w+)">([^<]+)<title>', _svg()
    )
    assert len(labels) == 2 + 1 + 7  # events, steps, run waiting, and the seven mark lanes
    for x, anchor, text in labels:
        assert anchor == "end" and float(x) == LEFT - LABEL_GAP
        assert len(text) * CHAR_PX <= LEFT - LABEL_GAP, text  # starts right of 0, ends before the plot


def test_the_legend_explains_the_bars_and_does_not_repeat_the_lanes():
    svg = _svg()
    lanes = set(re.findall(r'class="lane-label"[^>]*>([^<]+)<', svg))
    legend = re.findall(r'<g class="legend">.*?<text [^>]*>([^<]+)</text></g>', svg)
    assert legend == [text for _, text in LEGEND]
    assert not lanes & set(legend)


def test_steps_are_bars_with_durations_failed_attempts_and_retry_waits():
    svg = _svg(link=lambda seq: f"#seq-{seq}")
    assert '<a href="#seq-2"><rect class="step step-error"' in svg
    assert '<a href="#seq-3"><rect class="step step-completed"' in svg
    assert "#3 step lookup · attempt 2 · 1.250 s · completed" in svg
    assert "#2 step lookup · attempt 1 · 2.500 s · error: RuntimeError: boom" in svg
    assert 'class="retry-wait"' in svg and "waiting 1.500 s to retry step lookup (after attempt 1)" in svg


def test_an_approval_suspension_is_a_wait_on_the_runs_lane_and_a_mark_in_the_approval_lane():
    svg = _svg()
    assert re.search(
        r'<rect class="wait" [^>]*><title>#5 suspended \(approval_required\) · 30\.0 s · until', svg
    )
    assert 'class="mark mark-approval"' in svg


def test_the_time_axis_has_round_ticks_and_says_the_span():
    step, moments = ticks(at(0.3), at(59))
    assert step == 10 and [m.second for m in moments] == [10, 20, 30, 40, 50]
    step, moments = ticks(at(0), at(3 * 3600))
    assert step == 1800 and all(m.minute in (0, 30) and m.second == 0 for m in moments)
    svg = _svg()
    assert re.findall(r'class="tick-label"[^>]*>([^<]+)<', svg) == [
        "12:00:00",
        "12:00:10",
        "12:00:20",
        "12:00:30",
        "12:00:40",
        "12:00:50",
    ]
    assert "59.0 s in all · ticks every 10 s" in svg


@pytest.mark.django_db
def test_run_steps_reads_executions_retries_and_waits_from_the_events(tenant, settings):
    settings.KEEPER_RETRY_BACKOFF = 0
    run = run_start(tenant=tenant, workflow_name="test.flaky", input={"fail_times": 1}, actor="test").run
    run_suspend(run_id=run.run_id, actor="user:ops", reason="approval_required", detail="a person looks")
    run_resume(run_id=run.run_id, actor="user:ops", note="go on")
    for _ in range(4):  # the resume check, attempt 1 raises, attempt 2 completes
        run_advance(run_id=run.run_id, worker_id="w")
    run.refresh_from_db()
    assert run.status == "completed"
    steps = run_steps(run=run, limit=50)
    assert [(r.bar.step_id, r.bar.attempt, r.bar.outcome) for r in steps.rows] == [
        ("call", 1, "error"),
        ("call", 2, "completed"),
    ]
    failed, done = steps.rows
    assert (
        failed.error.startswith("RuntimeError: flaky failure on attempt 1")
        and failed.output == "retry in 0 s"
    )
    assert failed.bar.retry_until == done.bar.start  # the wait lasted until the next attempt began
    assert done.output == "completed" and done.input_digest.startswith("sha256:")
    assert done.bar.end - done.bar.start == timedelta(seconds=done.wall_s)
    [wait] = steps.waits
    assert wait.reason == "approval_required" and not wait.ongoing and wait.end > wait.start


@pytest.mark.django_db
def test_run_steps_keeps_the_newest_executions_of_a_long_run(tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 20}, actor="test").run
    for _ in range(30):
        if run_advance(run_id=run.run_id, worker_id="w").status != "running":
            break
    run.refresh_from_db()
    assert run.status == "completed" and run.state_revision == 23  # started, start, 20 ticks, finish
    newest = run_steps(run=run, limit=3)  # read in a window of the newest seqs
    assert [r.bar.seq for r in newest.rows] == [21, 22, 23] and newest.more
    assert [r.output for r in newest.rows] == ["→ tick", "→ finish", "completed"]
    every = run_steps(run=run, limit=100)  # more than the run has: the whole run, nothing more
    assert [r.bar.seq for r in every.rows] == list(range(2, 24)) and not every.more
