"""The engineer's Schedules page (next fire time, last run, pause/resume/delete confirmed with a note and
audited) and Workflows page (runs by status per version, drain)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from console.models import AuditEntry
from core.tenancy import tenant_bind, tenant_ensure
from runs.engine.runs import run_start
from runs.engine.schedule_models import WorkflowSchedule
from runs.engine.schedules import schedule_create, schedules_fire_tenant
from runs.engine.steps import run_advance
from runs.kernel.models import AgentRun

pytestmark = pytest.mark.django_db


def _schedule(tenant, **kwargs) -> WorkflowSchedule:
    return schedule_create(
        tenant=tenant,
        actor="t",
        workflow_name="demo.countdown",
        input={"n": 0},
        **({"interval_seconds": 60} | kwargs),
    )


def test_the_list_shows_next_fire_time_last_run_and_only_the_users_tenants(as_role, tenant):
    mine = _schedule(tenant, now=timezone.now() - timedelta(minutes=5))
    [fired] = schedules_fire_tenant(tenant=tenant)
    globex = tenant_ensure(slug="globex", name="Globex")
    theirs = _schedule(globex, interval_seconds=None, cron="0 4 * * *")
    mine.refresh_from_db()
    page = as_role("engineer").get("/schedules/")
    assert page.status_code == 200
    html = page.content.decode()
    assert str(mine.schedule_id) in html and str(theirs.schedule_id) not in html
    assert mine.next_fire_at.strftime("%Y-%m-%d %H:%M:%S") in html
    assert f"/runs/{fired.run_id}/" in html and "running" in html
    assert "/schedules/" in as_role("engineer").get("/runs/").content.decode()  # in the engineer nav


def test_pause_asks_for_confirmation_and_a_note_then_pauses_and_audits(as_role, tenant):
    schedule = _schedule(tenant)
    client = as_role("engineer")
    url = f"/schedules/{schedule.schedule_id}/pause/"
    confirm = client.get(url)
    assert confirm.status_code == 200 and "starts no run until it is resumed" in confirm.content.decode()
    no_note = client.post(url, {"confirm": "yes", "note": ""})
    assert no_note.status_code == 422 and "Say why" in no_note.content.decode()
    schedule.refresh_from_db()
    assert schedule.enabled and not AuditEntry.objects.exists()
    done = client.post(url, {"confirm": "yes", "note": "payments maintenance tonight"})
    assert done.status_code == 302
    schedule.refresh_from_db()
    assert not schedule.enabled
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.target_type, entry.target_id, entry.note, entry.tenant_id) == (
        "schedule_pause",
        "schedule",
        str(schedule.schedule_id),
        "payments maintenance tonight",
        tenant.tenant_id,
    )
    assert client.post(url, {"confirm": "yes", "note": "again"}).status_code == 422  # paused already
    resumed = client.post(f"/schedules/{schedule.schedule_id}/resume/", {"confirm": "yes", "note": "done"})
    assert resumed.status_code == 302
    schedule.refresh_from_db()
    assert schedule.enabled and schedule.next_fire_at > timezone.now()
    assert AuditEntry.objects.filter(action="schedule_resume").count() == 1


def test_delete_needs_the_confirmation_and_keeps_the_runs(as_role, tenant):
    schedule = _schedule(tenant, now=timezone.now() - timedelta(minutes=5))
    [fired] = schedules_fire_tenant(tenant=tenant)
    client = as_role("engineer")
    url = f"/schedules/{schedule.schedule_id}/delete/"
    unconfirmed = client.post(url, {"note": "not needed"})  # the list's button: confirmation page first
    assert unconfirmed.status_code == 200 and WorkflowSchedule.objects.exists()
    assert client.post(url, {"confirm": "yes", "note": "not needed any more"}).status_code == 302
    assert not WorkflowSchedule.objects.exists()
    assert AgentRun.objects.filter(run_id=fired.run_id).exists()
    assert AuditEntry.objects.get().action == "schedule_delete"


def test_another_tenants_schedule_is_not_found_and_nothing_changes(as_role, tenant):
    globex = tenant_ensure(slug="globex", name="Globex")
    theirs = _schedule(globex)
    client = as_role("engineer")
    for action in ("pause", "delete"):
        assert client.get(f"/schedules/{theirs.schedule_id}/{action}/").status_code == 404
        response = client.post(f"/schedules/{theirs.schedule_id}/{action}/", {"confirm": "yes", "note": "x"})
        assert response.status_code == 404
    with tenant_bind(globex.tenant_id):
        assert WorkflowSchedule.objects.get().enabled
    assert not AuditEntry.objects.exists()


def test_a_role_other_than_engineer_cannot_pause(as_role, tenant):
    schedule = _schedule(tenant)
    response = as_role("support").post(
        f"/schedules/{schedule.schedule_id}/pause/", {"confirm": "yes", "note": "x"}
    )
    assert response.status_code == 403
    schedule.refresh_from_db()
    assert schedule.enabled


def test_the_workflows_page_counts_runs_per_version_and_says_what_holds_a_version(as_role, tenant):
    done = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 0}, actor="t").run
    for _ in range(5):
        run_advance(run_id=done.run_id, worker_id="w-test")
    held = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 0}, actor="t").run
    html = as_role("engineer").get("/workflows/").content.decode()
    assert 'data-workflow="demo.countdown"' in html
    section = html[html.index('data-workflow="demo.countdown"') :]
    section = section[: section.index("</section>")]
    assert "completed 1" in section and "running 1" in section and "newest" in section
    assert "/runs/?workflow=demo.countdown&amp;version=1&amp;status=running" in section
    AgentRun.objects.filter(run_id=held.run_id).update(workflow_version="0.9")  # an older deployment's run
    html = as_role("engineer").get("/workflows/").content.decode()
    section = html[html.index('data-workflow="demo.countdown"') :]
    section = section[: section.index("</section>")]
    assert "held by 1 running run(s) (its code is not registered here" in section
    assert f"/runs/{held.run_id}/" in section
    AgentRun.objects.filter(run_id=held.run_id).update(status="cancelled")
    html = as_role("engineer").get("/workflows/").content.decode()
    assert "safe to remove" in html
