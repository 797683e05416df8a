"""Resume verification: each check refuses with its own reason code, and nothing continues anyway."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.digests import json_digest
from runs import store
from runs.models import AgentEvent, AgentRun, Approval, ToolOperation
from runs.services.runs import run_resume, run_start, run_suspend
from runs.services.state import state_encode
from runs.services.steps import run_advance

pytestmark = pytest.mark.django_db

CHECKS = ["lease_and_revision", "tenant_workflow_schema", "artifacts_and_contracts", "event_log", "operations",
          "approvals", "budgets"]  # fmt: skip


def _suspended_demo(tenant, steps: int = 1, **input_extra):  # type: ignore[no-untyped-def]
    run = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 5, **input_extra}, actor="test"
    ).run
    for _ in range(steps):
        run_advance(run_id=run.run_id, worker_id="w")
    run_suspend(run_id=run.run_id, actor="user:ops", reason="manual_review")
    run.refresh_from_db()
    return run


def _resume(run: AgentRun) -> AgentEvent:
    run_resume(run_id=run.run_id, actor="user:ops", note="go on")
    run_advance(run_id=run.run_id, worker_id="w2")
    run.refresh_from_db()
    return AgentEvent.objects.filter(run=run, event_type__in=["resume_verified", "resume_refused"]).latest(
        "seq"
    )


def _assert_refused(run: AgentRun, event: AgentEvent, code: str) -> None:
    assert event.event_type == "resume_refused", event.payload
    assert (run.status, run.suspend_reason) == ("suspended", code)
    assert run.suspend_detail and run.resume_requested_at is None and run.lease_owner is None
    failed = [c for c in event.payload["checks"] if not c["ok"]]
    assert len(failed) == 1 and failed[0]["code"] == code


def test_a_clean_resume_records_every_check_then_runs_the_step(tenant):
    run = _suspended_demo(tenant)
    event = _resume(run)
    assert event.event_type == "resume_verified" and event.payload["trigger"] == "resume_request"
    assert [c["name"] for c in event.payload["checks"]] == CHECKS and all(
        c["ok"] for c in event.payload["checks"]
    )
    assert event.payload["requested_by"] == "user:ops"
    assert run.status == "running" and run.state["remaining"] == 4  # the tick after the resume ran


def test_a_tampered_state_is_refused(tenant):
    run = _suspended_demo(tenant)
    AgentRun.objects.filter(pk=run.pk).update(state={**run.state, "remaining": 0})
    _assert_refused(run, _resume(run), "state_digest_mismatch")
    assert AgentRun.objects.get(pk=run.pk).state["remaining"] == 0  # refused, not "repaired"


def test_a_gap_in_the_event_log_is_refused(tenant):
    run = _suspended_demo(tenant, steps=2)
    AgentEvent.objects.filter(run=run, seq=2).delete()
    _assert_refused(run, _resume(run), "event_seq_gap")


def test_history_from_other_code_is_refused_instead_of_guessed(tenant):
    run = _suspended_demo(tenant)
    AgentEvent.objects.filter(run=run, event_type="step_completed").update(step_id="renamed_step")
    _assert_refused(run, _resume(run), "history_mismatch")


def test_a_run_pinned_to_a_version_this_code_lacks_is_routed_to_drain(tenant):
    run = _suspended_demo(tenant)
    AgentRun.objects.filter(pk=run.pk).update(workflow_version="0")
    event = _resume(run)
    _assert_refused(run, event, "workflow_version_unavailable")
    assert "drain" in run.suspend_detail


def test_an_unknown_state_schema_version_is_blocked(tenant):
    run = _suspended_demo(tenant)
    AgentRun.objects.filter(pk=run.pk).update(state_schema_version=99)
    _assert_refused(run, _resume(run), "unsupported_checkpoint")


def test_a_changed_tool_contract_is_refused(tenant):
    run = _suspended_demo(tenant)
    now = timezone.now()
    ToolOperation.objects.create(operation_id="refund:o-1", tenant=tenant, run=run, step_id="refund",
                                 tool_name="payments.refund", tool_contract_version="payments.v0",
                                 request_digest="sha256:x", created_at=now, updated_at=now)  # fmt: skip
    _assert_refused(run, _resume(run), "tool_contract_changed")


def test_an_exhausted_budget_suspends_and_resume_refuses_it(tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 5, "budgets": {"steps": 2}},
                    actor="test").run  # fmt: skip
    results = [run_advance(run_id=run.run_id, worker_id="w") for _ in range(3)]
    assert [r.event_type for r in results] == ["step_completed", "step_completed", "run_suspended"]
    run.refresh_from_db()
    assert run.suspend_reason == "budget_exhausted" and run.state["budgets"]["steps"] == {
        "limit": 2,
        "used": 2,
    }
    _assert_refused(run, _resume(run), "budget_exhausted")


def test_budgets_are_recomputed_from_the_event_log(tenant):
    run = _suspended_demo(tenant, steps=2)
    spent = [e.payload.get("spent", {}).get("steps", 0) for e in AgentEvent.objects.filter(run=run)]
    assert sum(spent) == 2 == run.state["budgets"]["steps"]["used"]
    event = _resume(run)
    assert event.event_type == "resume_verified"
    assert run.state["budgets"]["steps"]["used"] == 3  # two before, plus the step after the resume


def test_an_expired_approval_refuses_the_resume_of_the_refund_step(tenant):
    run = run_start(tenant=tenant, workflow_name="refund", input={"order_id": "o-1"}, actor="test").run
    request = {"order_id": "o-1", "amount_minor": 500, "currency": "EUR"}
    approval = Approval.objects.create(
        tenant=tenant, run=run, step_id="approve", request=request, request_digest=json_digest(request),
        status="approved", decided_by="user:sam", decided_at=timezone.now(),
        expires_at=timezone.now() - timedelta(minutes=1),
    )  # fmt: skip
    grant = store.lease_acquire(run_id=run.run_id, owner="w", ttl=30)
    state = {**run.state, "refund_request": request, "request_digest": json_digest(request),
             "approval": {"approval_id": str(approval.approval_id), "status": "approved", "decided_by": "user:sam"}}  # fmt: skip
    encoded = state_encode(state)
    store.commit_step(run_id=run.run_id, expected_revision=grant.revision, epoch=grant.epoch, owner="w",
                      state_json=encoded.json, state_digest=encoded.digest, next_step="refund", status="suspended",
                      event_type="run_suspended", step_id=None, attempt=1, payload_json="{}",
                      suspend_reason="manual_review")  # fmt: skip
    _assert_refused(run, _resume(run), "approval_expired")
    assert not ToolOperation.objects.exists()  # no refund was attempted
