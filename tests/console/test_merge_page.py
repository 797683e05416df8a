"""Merging a branch back from the console: the fork's run page merges it into its parent, the merge
page shows each conflict's base, ours and theirs (escaped) and takes a pick for each, for engineers
only, audited, behind CSRF; in a real browser, the whole path from the fork's page to the applied
merge on the parent's."""

from __future__ import annotations

import pytest
from django.test import Client

from console.models import AuditEntry
from runs.engine.merges import run_merge
from runs.engine.workspace_models import WorkspaceMerge
from runs.kernel.models import AgentEvent, AgentRun
from tests.console.conftest import dialogs_dismissed, screenshot
from tests.runs.test_merges import PLAN, _files, _tree

HOSTILE = '<script>alert("merge")</script><img src=x onerror=alert(2)>'


def _conflicted(tenant):
    main = {"files": {"plan.md": PLAN.replace("step two", "main: " + HOSTILE), "notes.md": "main notes\n"}}
    branch = {
        "files": {"plan.md": PLAN.replace("step two", "branch's step two"), "notes.md": "branch notes\n"}
    }
    return _tree(tenant, main=main, branch=branch, files={"plan.md": PLAN, "notes.md": "notes\n"})


@pytest.mark.django_db(transaction=True)
def test_merging_and_resolving_need_the_engineer_role_csrf_and_are_audited(tenant, as_role, role_users):
    parent, child = _conflicted(tenant)
    support = Client()
    support.force_login(role_users["support"])
    assert support.post(f"/runs/{child.run_id}/merge/").status_code == 403
    assert not WorkspaceMerge.objects.exists()
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(role_users["engineer"])
    assert strict.post(f"/runs/{child.run_id}/merge/").status_code == 403
    assert not WorkspaceMerge.objects.exists()

    engineer = as_role("engineer")
    page = engineer.get(f"/runs/{child.run_id}/")
    assert b'id="merge-form"' in page.content
    assert b'id="merge-form"' not in engineer.get(f"/runs/{parent.run_id}/").content  # not a fork
    moved = engineer.post(f"/runs/{child.run_id}/merge/")
    merge = WorkspaceMerge.objects.get()
    assert moved.status_code == 302 and moved["Location"] == f"/runs/{parent.run_id}/merges/{merge.merge_id}/"
    entry = AuditEntry.objects.get(action="merge")
    assert entry.target_id == str(parent.run_id) and entry.details["merge_id"] == str(merge.merge_id)

    shown = engineer.get(moved["Location"])
    assert shown.status_code == 200
    assert HOSTILE.encode() not in shown.content and b"&lt;script&gt;alert(" in shown.content
    support = Client()
    support.force_login(role_users["support"])
    assert support.get(moved["Location"]).status_code == 403

    half = engineer.post(moved["Location"], {"take-0": "theirs"})
    assert half.status_code == 422 and b"pick ours, theirs or edited text" in half.content
    assert WorkspaceMerge.objects.get().status == "conflicts"
    ids = [c["id"] for c in merge.conflicts]
    assert ids == ["notes.md#0", "plan.md#0"]
    done = engineer.post(
        moved["Location"], {"take-0": "ours", "take-1": "edited", "text-1": "both steps\r\n"}
    )
    assert done.status_code == 302 and done["Location"] == f"/runs/{parent.run_id}/"
    assert WorkspaceMerge.objects.get().status == "applied"
    assert AuditEntry.objects.get(action="merge_resolve").details["picks"] == {
        "notes.md#0": "ours",
        "plan.md#0": "edited",
    }
    files = _files(tenant, parent.run_id)
    assert files["plan.md"] == b"# plan\nstep one\nboth steps\nstep three\n"
    assert files["notes.md"] == b"main notes\n"
    again = engineer.post(moved["Location"], {"take-0": "ours", "take-1": "ours"})
    assert again.status_code == 409


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_an_engineer_merges_a_fork_and_resolves_its_conflicts_in_the_browser(page_as, tenant):
    parent, child = _conflicted(tenant)
    page = page_as("engineer")
    alerts = dialogs_dismissed(page)
    page.goto(f"/runs/{child.run_id}/")
    page.click("#merge-button")
    page.wait_for_url(f"**/runs/{parent.run_id}/merges/*/")
    assert page.locator("#merge-status").inner_text() == "conflicts open"
    assert page.locator("section.conflict").count() == 2
    plan = page.locator("#conflict-1")
    assert plan.locator(".side-base").inner_text().strip() == "step two"
    assert plan.locator(".side-ours").inner_text().strip() == "main: " + HOSTILE  # shown as text
    assert plan.locator(".side-theirs").inner_text().strip() == "branch's step two"
    screenshot(page, "engineer-merge-conflicts")

    page.check("#conflict-0 input[value=theirs]")
    page.check("#conflict-1 input[value=edited]")
    page.fill("#conflict-1 textarea", "step two, as both branches wrote it")
    page.click("#resolve-button")
    page.wait_for_url(f"**/runs/{parent.run_id}/")
    assert "the merge is applied" in page.locator("body").inner_text()
    merge = WorkspaceMerge.objects.get()
    assert page.locator(f"#merges a[href$='/merges/{merge.merge_id}/']").count() == 1
    assert page.locator(f"#seq-{merge.result_seq}").inner_text().count("workspace_merged") == 1
    screenshot(page, "engineer-merge-applied")
    assert alerts == []
    files = _files(tenant, parent.run_id)
    assert files["plan.md"] == b"# plan\nstep one\nstep two, as both branches wrote it\nstep three\n"
    assert files["notes.md"] == b"branch notes\n"
    assert AgentEvent.objects.filter(run_id=parent.run_id, event_type="workspace_merged").count() == 1
    assert AgentRun.objects.get(run_id=parent.run_id).suspend_reason == "waiting_for_merge"


@pytest.mark.django_db(transaction=True)
def test_a_refused_merge_shows_its_reason_and_records_nothing(tenant, as_role):
    parent, child = _tree(tenant, main={"choice": "main"}, branch={"choice": "branch"})
    refused = as_role("engineer").post(f"/runs/{child.run_id}/merge/")
    assert refused.status_code == 409 and b"merge refused" in refused.content.lower()
    assert b"choice" in refused.content
    assert not AuditEntry.objects.filter(action="merge").exists()
    with pytest.raises(Exception):  # noqa: B017 - the same refusal from the service
        run_merge(run_id=child.run_id, actor="t")
