"""The approvals and reconciliation API: decisions by people, with reasons for every refusal."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from runs.engine.approvals import approval_check
from runs.engine.operations import operation_mark_started, operation_mark_unknown, operation_prepare_once
from runs.engine.runs import run_start, run_suspend
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, ToolOperation

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(db):
    client = APIClient()
    client.force_authenticate(
        get_user_model().objects.create_user("sam", password="pw-for-tests", is_staff=True, is_superuser=True)
    )
    return client


@pytest.fixture
def waiting(tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    run_suspend(run_id=run.run_id, actor="test", reason="approval_required")
    approval = approval_check(
        run_id=run.run_id,
        tenant_id=tenant.tenant_id,
        step_id="approve",
        request={"order_id": "o-1", "amount_minor": 100, "currency": "EUR"},
        request_digest="sha256:x",
        reasons=["delivered"],
        actor="w",
    ).approval
    return run, approval


def test_pending_approvals_are_listed_and_approving_resumes_the_run(api, waiting):
    run, approval = waiting
    listed = api.get("/api/v1/approvals/?status=pending").json()["results"]
    assert [a["approval_id"] for a in listed] == [str(approval.approval_id)]
    response = api.post(f"/api/v1/approvals/{approval.approval_id}/approve", {"note": "ok"}, format="json")
    assert response.status_code == 200 and response.json()["decided_by"] == "user:sam"
    run.refresh_from_db()
    assert (run.status, run.resume_requested_by) == (
        "suspended",
        "user:sam",
    )  # a worker verifies, then resumes
    again = api.post(f"/api/v1/approvals/{approval.approval_id}/approve", {}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "approval_not_pending"


def test_rejecting_needs_a_note(api, waiting):
    _, approval = waiting
    response = api.post(f"/api/v1/approvals/{approval.approval_id}/reject", {"note": ""}, format="json")
    assert response.status_code == 422 and response.json()["error"]["code"] == "note_required"
    assert api.get("/api/v1/approvals/?status=bogus").status_code == 400


def test_reconcile_through_the_api_with_validation(api, tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w",
            ttl=30,
        )
    )
    operation_prepare_once(
        tenant_id=tenant.tenant_id,
        run_id=run.run_id,
        step_id="refund",
        operation_id="refund:o-9",
        tool_name="payments.refund",
        tool_contract_version="payments.v1",
        request={"a": 1},
        actor="w",
    )
    operation_mark_started(
        tenant_id=tenant.tenant_id,
        operation_id="refund:o-9",
        actor="w",
        run_id=run.run_id,
        lease_epoch=grant.epoch,
    )
    operation_mark_unknown(tenant_id=tenant.tenant_id, operation_id="refund:o-9", actor="w", note="timeout")
    run_suspend(run_id=run.run_id, actor="w", reason="reconciliation_required")
    op = ToolOperation.objects.get()
    listed = api.get(f"/api/v1/runs/{run.run_id}/operations/").json()["results"]
    assert [(o["operation_id"], o["status"]) for o in listed] == [("refund:o-9", "unknown")]
    url = f"/api/v1/operations/{op.pk}/reconcile"
    assert api.post(url, {"outcome": "perhaps", "note": "x"}, format="json").status_code == 400
    missing_ref = api.post(url, {"outcome": "applied", "note": "seen at PSP"}, format="json")
    assert missing_ref.status_code == 422 and missing_ref.json()["error"]["code"] == "external_ref_required"
    done = api.post(
        url, {"outcome": "applied", "note": "seen at PSP", "external_ref": "rf_77"}, format="json"
    )
    assert done.status_code == 200 and done.json()["status"] == "succeeded"
    assert (
        AgentEvent.objects.filter(run=run, event_type="operation_reconciled", actor="user:sam").count() == 1
    )
    assert (
        api.post(
            "/api/v1/operations/999999/reconcile", {"outcome": "applied", "note": "x"}, format="json"
        ).json()["error"]["code"]
        == "operation_not_found"
    )


def test_approvals_come_in_keyset_pages_that_walk_each_once(api, tenant):
    made = set()
    for i in range(5):
        run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": i}, actor="test").run
        run_suspend(run_id=run.run_id, actor="test", reason="approval_required")
        made.add(
            str(
                approval_check(
                    run_id=run.run_id,
                    tenant_id=tenant.tenant_id,
                    step_id="approve",
                    request={"order_id": f"o-{i}", "amount_minor": 100, "currency": "EUR"},
                    request_digest=f"sha256:{i}",
                    reasons=["delivered"],
                    actor="w",
                ).approval.approval_id
            )
        )
    seen, params = [], {"limit": 2}
    while True:
        page = api.get("/api/v1/approvals/", params).json()
        assert len(page["results"]) <= 2
        seen += [a["approval_id"] for a in page["results"]]
        if page["next"] is None:
            break
        params = {"limit": 2, **page["next"]}
    assert sorted(seen) == sorted(made) and len(seen) == 5
    for bad in ({"limit": 0}, {"limit": "abc"}, {"before_created_at": "2026-01-01T00:00:00Z"}):
        response = api.get("/api/v1/approvals/", bad)
        assert response.status_code == 400 and "error" in response.json(), bad
