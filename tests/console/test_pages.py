"""Console and admin pages render for staff, escape user text, and refuse anonymous visitors."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from runs.services.runs import run_start, run_suspend

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(client):  # type: ignore[no-untyped-def]
    user = get_user_model().objects.create_superuser("root", password="pw-for-tests")
    client.force_login(user)
    return client


def test_anonymous_visitors_are_sent_to_sign_in(client):
    response = client.get("/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_run_list_shows_runs_and_escapes_their_text(staff_client, tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    run_suspend(run_id=run.run_id, actor="test", reason="<script>alert(1)</script>")
    page = staff_client.get("/?status=suspended").content.decode()
    assert str(run.run_id) in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "suspended: 1" in page


def test_admin_shows_runs_events_read_only(staff_client, tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    pages = ["/admin/runs/agentrun/", f"/admin/runs/agentrun/{run.run_id}/change/", "/admin/runs/agentevent/",
             "/admin/runs/tooloperation/", "/admin/runs/approval/", "/admin/core/tenant/",
             "/admin/sandbox/sandboxorder/", "/admin/sandbox/sandboxrefund/", "/admin/sandbox/sandboxfault/"]  # fmt: skip
    for url in pages:
        assert staff_client.get(url).status_code == 200, url
    assert staff_client.get("/admin/runs/agentevent/add/").status_code == 403
