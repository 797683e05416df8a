"""Cancel, rewind and bulk actions say what will happen first and need a note: the run page's
button opens a confirmation, an empty note is a form error (422) that applies nothing, and bulk
resume leaves out runs waiting for an approval."""

from __future__ import annotations

import pytest

from console.models import AuditEntry
from runs.engine.runs import run_start, run_suspend
from runs.kernel.models import AgentRun
from tests.console.conftest import screenshot
from tests.console.test_engineer import detail, finish, start, suspended

pytestmark = pytest.mark.django_db


def test_cancel_confirms_first_and_an_empty_note_is_a_form_error(as_role, tenant):
    run = suspended(tenant)
    client = as_role("engineer")
    asked = client.post(detail(run, "run_cancel"), {"note": "customer gone"})  # the run page's form
    page = asked.content.decode()
    assert asked.status_code == 200 and "stops for good" in page and 'name="confirm" value="yes"' in page
    assert "customer gone</textarea>" in page  # the note typed on the run page is kept
    assert client.get(detail(run, "run_cancel")).status_code == 200
    for note in ("", "   "):
        refused = client.post(detail(run, "run_cancel"), {"note": note, "confirm": "yes"})
        assert refused.status_code == 422 and "Say why in the note" in refused.content.decode()
    assert AgentRun.objects.get(run_id=run.run_id).status == "suspended" and not AuditEntry.objects.exists()
    done = client.post(detail(run, "run_cancel"), {"note": "customer gone", "confirm": "yes"})
    assert done.status_code == 302 and AgentRun.objects.get(run_id=run.run_id).status == "cancelled"
    assert AuditEntry.objects.get(action="cancel").note == "customer gone"


def test_rewind_says_it_supersedes_the_original_and_needs_a_note(as_role, tenant):
    run = finish(start(tenant, n=3))
    client = as_role("engineer")
    asked = client.post(detail(run, "run_rewind"), {"at_seq": 2, "note": ""})
    page = asked.content.decode()
    assert asked.status_code == 200 and "The rewind supersedes the original" in page
    assert 'name="at_seq" value="2"' in page and "right after event 2 of this run" in page
    refused = client.post(detail(run, "run_rewind"), {"at_seq": 2, "note": " ", "confirm": "yes"})
    assert refused.status_code == 422 and "Say why in the note" in refused.content.decode()
    run.refresh_from_db()
    assert run.superseded_by_id is None and not AuditEntry.objects.exists()
    done = client.post(detail(run, "run_rewind"), {"at_seq": 2, "note": "wrong turn", "confirm": "yes"})
    run.refresh_from_db()
    assert done.status_code == 302 and run.superseded_by_id is not None
    assert AuditEntry.objects.get(action="rewind").note == "wrong turn"


def test_a_bulk_action_needs_a_note_and_says_what_will_happen(as_role, tenant):
    runs = [start(tenant) for _ in range(2)]
    client = as_role("engineer")
    dry = client.get("/runs/bulk/", {"action": "cancel"})
    assert "each run stops for good" in dry.content.decode()
    assert "<strong>2</strong> runs change" in dry.content.decode()
    form = {"action": "cancel", "token": dry.context["token"], "confirm": "yes", "note": ""}
    refused = client.post("/runs/bulk/", form)
    assert refused.status_code == 422 and "Say why in the note" in refused.content.decode()
    assert 'id="bulk-confirm"' in refused.content.decode()  # the dry run again, to fix the note
    assert not AuditEntry.objects.exists()
    assert {r.status for r in AgentRun.objects.filter(run_id__in=[r.run_id for r in runs])} == {"running"}
    applied = client.post("/runs/bulk/", {**form, "note": "outage"})
    assert applied.status_code == 200 and len(applied.context["changed"]) == 2


def test_bulk_resume_leaves_out_runs_waiting_for_an_approval(as_role, tenant):
    waiting = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 3}, actor="test").run
    run_suspend(run_id=waiting.run_id, actor="test", reason="approval_required", detail="refund")
    looked = suspended(tenant)
    client = as_role("engineer")
    dry = client.get("/runs/bulk/", {"action": "resume"})
    assert dry.context["matched"] == 2 and dry.context["would"] == 1
    assert [r.run_id for r in dry.context["preview"]] == [looked.run_id]
    form = {"action": "resume", "token": dry.context["token"], "confirm": "yes", "note": "after outage"}
    applied = client.post("/runs/bulk/", form)
    assert [r.run_id for r in applied.context["changed"]] == [looked.run_id]
    [(skipped, why)] = applied.context["skipped"]
    assert skipped.run_id == waiting.run_id and "waits for an approval" in why
    assert AgentRun.objects.get(run_id=waiting.run_id).resume_requested_at is None


def test_the_bulk_resume_dry_run_counts_only_runs_a_resume_would_change(as_role, tenant):
    """The dry run's count leaves out the runs the action would skip (a resume already asked, a
    subject erased): not 38 said to change, then 5 changed and 33 skipped."""
    from runs.engine.runs import run_resume

    pending = suspended(tenant)
    run_resume(run_id=pending.run_id, actor="user:ops", note="first")
    copy = suspended(tenant)
    AgentRun.objects.filter(run_id=copy.run_id).update(imported=True)  # a history copy never runs here
    looked = suspended(tenant)
    dry = as_role("engineer").get("/runs/bulk/", {"action": "resume"})
    assert dry.context["matched"] == 3 and dry.context["would"] == 1
    assert [r.run_id for r in dry.context["preview"]] == [looked.run_id]


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_cancel_in_the_browser_confirms_and_requires_a_note(page_as, tenant):
    run = suspended(tenant)
    page = page_as("engineer")
    page.goto(detail(run))
    page.click(f"form[action='{detail(run, 'run_cancel')}'] button[type=submit]")
    page.wait_for_selector("#confirm-cancel")
    assert "stops for good" in page.locator("#confirm-effects").inner_text()
    assert AgentRun.objects.get(run_id=run.run_id).status == "suspended"
    page.click("#confirm-form button[type=submit]")  # no note
    page.wait_for_selector("#note-error")
    assert "Say why in the note" in page.locator("#note-error").inner_text()
    screenshot(page, "engineer-cancel-confirm-note-error")
    assert AgentRun.objects.get(run_id=run.run_id).status == "suspended"
    page.fill("#confirm-note", "the customer withdrew")
    page.click("#confirm-form button[type=submit]")
    page.wait_for_url(f"**{detail(run)}")
    assert "cancelled" in page.locator("h1 .pill").inner_text()
    assert AgentRun.objects.get(run_id=run.run_id).status == "cancelled"

    done = finish(start(tenant, n=3))
    page.goto(detail(done))
    page.fill("#rewind-form input[name=at_seq]", "2")
    page.click("#rewind-form button[type=submit]")
    page.wait_for_selector("#confirm-rewind")
    assert "The rewind supersedes the original" in page.locator("#confirm-effects").inner_text()
    screenshot(page, "engineer-rewind-confirm")
