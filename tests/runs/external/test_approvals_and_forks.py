"""External runs take approvals (verified on resume like Keeper's own) and forks, through the same APIs."""

from __future__ import annotations

import pytest

from runs.kernel.models import AgentEvent, AgentRun

pytestmark = pytest.mark.django_db

GUARDED = {
    "name": "ext.approved",
    "version": "1",
    "steps": ["approve", "refund"],
    "approval_guarded_steps": ["refund"],
}


def test_an_external_run_waits_for_an_approval_and_resumes_verified(api, tenant):
    assert api.post("/api/v1/workflows/external/", GUARDED, format="json").status_code == 201
    run_id = api.post(
        "/api/v1/runs/", {"workflow": "ext.approved", "input": {"amount": 5}}, format="json"
    ).json()["run_id"]
    c = api.post("/api/v1/workers/claim", {"workflows": ["ext.approved"]}, format="json").json()
    w = f"/api/v1/workers/runs/{run_id}/"
    asked = api.post(
        w + "approval", {"lease_token": c["lease_token"], "request": {"amount": 5}}, format="json"
    ).json()
    assert (asked["verdict"], asked["reason"]) == ("wait", "approval_required")
    state = {
        **c["state"],
        "approval": {"approval_id": asked["approval_id"]},
        "request_digest": asked["request_digest"],
    }
    r = api.post(
        w + "commit",
        {
            "lease_token": c["lease_token"],
            "expected_revision": c["revision"],
            "state": state,
            "suspend": {"reason": asked["reason"], "detail": asked["detail"], "step": "refund"},
        },
        format="json",
    )
    assert r.status_code == 200 and r.json()["status"] == "suspended"
    assert (
        api.post("/api/v1/workers/claim", {"workflows": ["ext.approved"]}, format="json").status_code == 204
    )
    approved = api.post(f"/api/v1/approvals/{asked['approval_id']}/approve", {"note": "ok"}, format="json")
    assert approved.status_code == 200, approved.content
    again = api.post("/api/v1/workers/claim", {"workflows": ["ext.approved"]}, format="json").json()
    assert (again["run_id"], again["step"], again["verified"]) == (run_id, "refund", "resume_request")
    checks = AgentEvent.objects.filter(run_id=run_id, event_type="resume_verified").get().payload["checks"]
    assert any(ch["name"] == "approvals" and ch["ok"] and "valid until" in ch["detail"] for ch in checks)
    use = api.post(
        w + "approval", {"lease_token": again["lease_token"], "request": {"amount": 5}}, format="json"
    )
    assert use.json()["verdict"] == "use"


def test_a_fork_of_an_external_run_is_claimed_by_outside_workers(api, workflow, tenant):
    run_id = api.post(
        "/api/v1/runs/", {"workflow": "ext.refund", "input": {"order_id": "o-f"}}, format="json"
    ).json()["run_id"]
    c = api.post("/api/v1/workers/claim", {"workflows": ["ext.refund"]}, format="json").json()
    api.post(
        f"/api/v1/workers/runs/{run_id}/commit",
        {"lease_token": c["lease_token"], "expected_revision": 1, "state": c["state"], "next_step": "refund"},
        format="json",
    )
    assert api.post(f"/api/v1/runs/{run_id}/cancel", {"note": "try again"}, format="json").status_code == 200
    fork = api.post(f"/api/v1/runs/{run_id}/fork", {"at_seq": 2, "note": "again"}, format="json")
    assert fork.status_code == 201, fork.content
    child = fork.json()["run_id"]
    claim = api.post("/api/v1/workers/claim", {"workflows": ["ext.refund"]}, format="json").json()
    assert (claim["run_id"], claim["step"]) == (child, "refund")
    assert AgentRun.objects.get(run_id=child).parent_run_id is not None


def test_an_external_run_shows_in_the_engineers_console(api, workflow, tenant, client):
    from django.urls import reverse

    from core.roles import ENGINEER
    from tests.console.conftest import make_user

    run_id = api.post(
        "/api/v1/runs/", {"workflow": "ext.refund", "input": {"order_id": "o-c"}}, format="json"
    ).json()["run_id"]
    client.force_login(make_user("eng", ENGINEER, tenants=(tenant,)))
    page = client.get(reverse("console:run_detail", args=[run_id]))
    assert page.status_code == 200 and b"ext.refund" in page.content
