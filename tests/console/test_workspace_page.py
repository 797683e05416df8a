"""The engineer's workspace page: files at a snapshot, a diff between two, 404 for another tenant's run."""

from __future__ import annotations

import pytest
from django.urls import reverse

import tests.runs.workspace_flows  # noqa: F401 - registers test.workspace
from console.roles import ENGINEER
from runs.engine.runs import run_start
from runs.engine.steps import run_advance
from runs.engine.workspace import workspace_snapshots

pytestmark = pytest.mark.django_db(transaction=True)


def _drive(run_id) -> None:
    for _ in range(20):
        if run_advance(run_id=run_id).status != "running":
            return


def test_the_page_shows_files_and_a_diff_and_hides_other_tenants(as_role, tenant, other_tenant, settings):
    settings.KEEPER_WORKSPACE_SNAPSHOT_STEPS = 1
    run = run_start(tenant=tenant, workflow_name="test.workspace", input={"topic": "pages"}, actor="t").run
    _drive(run.run_id)
    first, *_, last = [s.seq for s in workspace_snapshots(run_id=run.run_id)]
    client = as_role(ENGINEER)
    page = client.get(reverse("console:run_workspace", args=[run.run_id]) + f"?at={last}&diff={first}")
    body = page.content.decode()
    assert page.status_code == 200, body
    assert "notes/progress.md" in body and "plan.md" in body
    assert "+- revised" in body  # plan.md changed between the first and the last snapshot
    detail = client.get(reverse("console:run_detail", args=[run.run_id])).content.decode()
    assert reverse("console:run_workspace", args=[run.run_id]) in detail
    assert client.get(reverse("console:run_workspace", args=[run.run_id]) + "?at=x").status_code == 422
    theirs = run_start(
        tenant=other_tenant, workflow_name="test.workspace", input={"topic": "t"}, actor="t"
    ).run
    assert client.get(reverse("console:run_workspace", args=[theirs.run_id])).status_code == 404
