"""A run sleeping on a durable timer shows when it wakes: on the engineer run page, in the support
inbox row and on the support run page."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

import tests.runs.authoring_flows  # noqa: F401 - registers test.nap, which sleeps on a timer
from console.display import countdown, wake_countdown
from runs.engine.runs import run_start
from runs.engine.steps import run_advance

pytestmark = pytest.mark.django_db


def test_the_wake_countdown_reads_like_the_approval_countdown():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert wake_countdown(now + timedelta(hours=2, minutes=5, seconds=30), now) == "wakes in 2 h 5 min"
    assert wake_countdown(now + timedelta(days=3, hours=1), now) == "wakes in 3 d 1 h"
    assert wake_countdown(now + timedelta(seconds=30), now) == "wakes in under a minute"
    assert wake_countdown(now - timedelta(seconds=10), now) == "due now"
    assert wake_countdown(now - timedelta(minutes=4), now) == "due 4 min ago"
    # The approval countdown reads as before.
    assert countdown(now + timedelta(hours=23, minutes=59, seconds=5), now) == "expires in 23 h 59 min"
    assert countdown(now + timedelta(seconds=59), now) == "expires in under a minute"
    assert countdown(now - timedelta(minutes=5), now) == "expired 5 min ago"


def test_a_sleeping_run_shows_its_countdown_on_the_run_pages_and_in_the_inbox(as_role, tenant):
    run = run_start(tenant=tenant, workflow_name="test.nap", input={"seconds": 7200}, actor="test").run
    run_advance(run_id=run.run_id, worker_id="w-test")
    run.refresh_from_db()
    assert (run.status, run.suspend_reason) == ("suspended", "timer") and run.wake_at is not None
    engineer = as_role("engineer").get(reverse("console:run_detail", args=[run.run_id])).content.decode()
    assert "wakes in 1 h 59 min" in engineer
    support = as_role("support")
    inbox = support.get(reverse("console:support_inbox")).content.decode()
    row = inbox[inbox.index(f'data-run="{run.run_id}"') :]
    assert "wakes in 1 h 59 min" in row[: row.index("</tr>")]
    page = support.get(reverse("console:support_run", args=[run.run_id])).content.decode()
    assert "wakes in 1 h 59 min" in page
