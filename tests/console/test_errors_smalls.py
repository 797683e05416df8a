"""Small things a new user tripped over: "just now" instead of "0 minutes ago", versions shown as
"v1" everywhere, times without microseconds (UTC on the server, local in the browser), typed date
filters, run search by subject and by text in the suspend reason, and an engineer's unstarted fork
kept out of the support inbox."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.template import Context, Template
from django.utils import timezone

from console.models import AuditEntry
from runs.engine.forks import run_fork
from runs.engine.runs import run_start, run_suspend
from runs.kernel.models import AgentRun
from tests.console.test_engineer import finish, start

pytestmark = pytest.mark.django_db


def render(source: str, **context) -> str:
    return Template("{% load console_time %}" + source).render(Context(context))


def test_ago_says_just_now_under_a_minute():
    now = timezone.now()
    assert render("{{ t|ago }}", t=now) == "just now"
    assert render("{{ t|ago }}", t=now - timedelta(seconds=59)) == "just now"
    assert render("{{ t|ago }}", t=now - timedelta(minutes=5, seconds=3)) == "5\xa0minutes ago"


def test_local_time_is_utc_to_the_second_until_the_browser_localizes_it():
    when = datetime(2026, 3, 1, 12, 30, 5, 123456, tzinfo=UTC)
    html = render("{% local_time t %}", t=when)
    assert html == (
        '<time datetime="2026-03-01T12:30:05.123456+00:00" data-local title="2026-03-01 12:30:05 UTC">'
        "2026-03-01 12:30:05 UTC</time>"
    )
    assert render("{% local_time t %}", t=None) == "—"


def test_the_support_run_page_says_v1_and_the_inbox_says_just_now(as_role, tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    run_suspend(run_id=run.run_id, actor="test", reason="needs_look", detail="look")
    client = as_role("support")
    page = client.get(f"/support/runs/{run.run_id}/").content.decode()
    assert "demo.countdown v1 · tenant acme" in page
    inbox = client.get("/support/").content.decode()
    assert "just now" in inbox and "0\xa0minutes ago" not in inbox


def test_the_support_inbox_leaves_out_an_engineers_unstarted_fork(as_role, tenant):
    done = finish(start(tenant, n=2))
    fork = run_fork(run_id=done.run_id, at_seq=2, actor="user:engineer", start=False)
    assert AgentRun.objects.get(run_id=fork.run_id).suspend_reason == "fork_not_started"
    waiting = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    run_suspend(run_id=waiting.run_id, actor="test", reason="needs_look", detail="look")
    inbox = as_role("support").get("/support/").content.decode()
    assert str(waiting.run_id) in inbox and str(fork.run_id) not in inbox


def test_run_search_by_subject_and_text_in_the_suspend_reason(as_role, tenant):
    alice = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test", subject="cust-alice"
    ).run
    bob = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test", subject="cust-bob"
    ).run
    run_suspend(run_id=bob.run_id, actor="test", reason="needs_look", detail="carrier says parcel lost")
    client = as_role("engineer")

    def found(**params) -> set[str]:
        page = client.get("/runs/", params).content.decode()
        return {str(r.run_id) for r in (alice, bob) if f'data-run="{r.run_id}"' in page}

    assert found(subject="cust-alice") == {str(alice.run_id)}
    assert found(reason="parcel lost") == {str(bob.run_id)}  # text in the detail
    assert found(reason="NEEDS") == {str(bob.run_id)}  # in the reason, any case
    page = client.get("/runs/", {"subject": "cust-alice"}).content.decode()
    assert 'type="datetime-local"' in page and "(YYYY-MM-DD HH:MM, UTC)" in page
    bad = client.get("/runs/", {"since": "yesterday"})
    assert bad.status_code == 422 and "Enter a time as YYYY-MM-DD HH:MM" in bad.content.decode()
    assert not AuditEntry.objects.exists()
