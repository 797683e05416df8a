"""Resume verification: each check refuses with its own reason code, and nothing continues anyway."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.digests import json_digest
from runs.engine.runs import run_resume, run_start, run_suspend
from runs.engine.steps import run_advance
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import AgentEvent, AgentRun, Approval, ToolOperation
from runs.kernel.state import state_encode

pytestmark = pytest.mark.django_db

CHECKS = [
    "lease_and_revision",
    "tenant_workflow_schema",
    "artifacts_and_contracts",
    "event_log",
    "operations",
    "approvals",
    "budgets",
]


def _suspended_demo(tenant, steps: int = 1, **input_extra):
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
    ToolOperation.objects.create(
        operation_id="refund:o-1",
        tenant=tenant,
        run=run,
        step_id="refund",
        tool_name="payments.refund",
        tool_contract_version="payments.v0",
        request_digest="sha256:x",
        created_at=now,
        updated_at=now,
    )
    _assert_refused(run, _resume(run), "tool_contract_changed")


def test_an_exhausted_budget_suspends_and_resume_refuses_it(tenant):
    run = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 5, "budgets": {"steps": 2}}, actor="test"
    ).run
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


def _refund_waiting_at_refund(tenant, *, expires_in: timedelta):
    """A refund run suspended before its guarded `refund` step with an approval that expires (or
    expired) `expires_in` from now, as after a cool-off or a crash."""
    run = run_start(tenant=tenant, workflow_name="refund", input={"order_id": "o-1"}, actor="test").run
    request = {"order_id": "o-1", "amount_minor": 500, "currency": "EUR"}
    approval = Approval.objects.create(
        tenant=tenant,
        run=run,
        step_id="approve",
        request=request,
        request_digest=json_digest(request),
        status="approved",
        decided_by="user:sam",
        decided_at=timezone.now(),
        expires_at=timezone.now() + expires_in,
    )
    grant = apply(
        m.LeaseTaken(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            owner="w",
            ttl=30,
        )
    )
    assert grant is not None
    state = {
        **run.state,
        "refund_request": request,
        "request_digest": json_digest(request),
        "decision": {"reasons": ["amount above the limit"]},
        "approval": {
            "approval_id": str(approval.approval_id),
            "status": "approved",
            "decided_by": "user:sam",
        },
    }
    encoded = state_encode(state)
    apply(
        m.Suspended(
            m.Held(run.run_id, run.tenant_id, "w", grant.epoch, grant.revision, 1),
            encoded,
            "refund",
            "manual_review",
            "",
            {},
        )
    )
    return run, approval


def test_an_approval_that_lapsed_during_a_wait_sends_the_refund_step_back_to_ask_again(tenant):
    """Not a resume refused (`approval_expired`) that only an engineer's rewind can move on. The
    refund step checks its approval again before it pays and goes back to
    `approve` itself, so verification lets it: a lapse of time is not a doubt."""
    run, approval = _refund_waiting_at_refund(tenant, expires_in=-timedelta(minutes=1))
    event = _resume(run)
    assert event.event_type == "resume_verified", event.payload
    [check] = [c for c in event.payload["checks"] if c["name"] == "approvals"]
    assert check["ok"] and f"approval {approval.approval_id} expired at" in check["detail"]
    assert "step 'refund' goes back to 'approve' to ask again" in check["detail"]
    assert (run.status, run.next_step) == ("running", "approve")
    run_advance(run_id=run.run_id, worker_id="w2")  # `approve` asks again
    run.refresh_from_db()
    assert (run.status, run.suspend_reason) == ("suspended", "approval_expired")
    [pending] = Approval.objects.filter(run=run, status="pending")
    assert pending.approval_id != approval.approval_id and pending.expires_at > timezone.now()
    # No refund was sent: the operation was prepared (its request recorded) and went no further.
    assert list(ToolOperation.objects.values_list("status", flat=True)) == ["prepared"]


def test_a_changed_request_with_a_lapsed_approval_is_still_refused(tenant):
    run, approval = _refund_waiting_at_refund(tenant, expires_in=-timedelta(minutes=1))
    Approval.objects.filter(pk=approval.pk).update(request_digest="sha256:" + "0" * 64)
    _assert_refused(run, _resume(run), "approval_digest_mismatch")
    assert not ToolOperation.objects.exists()


def test_a_guarded_step_that_cannot_go_back_is_refused_on_a_lapsed_approval(tenant, monkeypatch):
    """A workflow whose guarded step does not check its approval itself (registered without the
    step that asks: an outside worker's workflow) still stops for a person."""
    from dataclasses import replace

    from runs.engine.registry import registry

    run, _ = _refund_waiting_at_refund(tenant, expires_in=-timedelta(minutes=1))
    workflow = registry.get("refund")
    monkeypatch.setitem(
        registry._workflows, (workflow.name, workflow.version), replace(workflow, approval_asked_at={})
    )
    _assert_refused(run, _resume(run), "approval_expired")
    assert not ToolOperation.objects.exists()


# --- a refused changed state stays refused until an engineer accepts it ---------------------------


def _edit_state_by_sql(run: AgentRun, **changes: object) -> None:
    import json

    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE agent_runs SET state = state || %s::jsonb WHERE run_id = %s",
            [json.dumps(changes), run.run_id],
        )


def test_a_state_changed_outside_the_engine_stays_refused_until_an_engineer_accepts_it(tenant):
    from core.errors import ApplicationError

    run = _suspended_demo(tenant)
    committed = AgentEvent.objects.filter(run=run).latest("seq").state_digest
    _edit_state_by_sql(run, remaining=2)
    _assert_refused(run, _resume(run), "state_digest_mismatch")
    _assert_refused(run, _resume(run), "state_digest_mismatch")  # a plain resume again: the same refusal
    assert run.state_digest == committed and run.state["remaining"] == 2
    from runs.engine.resume import run_state_accept

    with pytest.raises(ApplicationError) as no_note:
        run_state_accept(run_id=run.run_id, actor="user:eng", note="  ")
    assert (no_note.value.code, no_note.value.http_status // 100) == ("note_required", 4)
    with pytest.raises(ApplicationError) as stale:
        run_state_accept(run_id=run.run_id, actor="user:eng", note="ok", expected_digest=committed)
    assert stale.value.code == "state_changed"
    run_state_accept(run_id=run.run_id, actor="user:eng", note="ticket 4711: set by hand on purpose")
    accepted = AgentEvent.objects.get(run=run, event_type="state_accepted")
    edited = state_encode({**run.state, "remaining": 2}).digest
    assert accepted.payload == {
        "refused_code": "state_digest_mismatch",
        "digest_before": committed,
        "digest_after": edited,
        "note": "ticket 4711: set by hand on purpose",
    }
    assert (accepted.actor, accepted.state_digest, accepted.state["remaining"]) == ("user:eng", edited, 2)
    run.refresh_from_db()
    assert (run.status, run.suspend_reason) == ("suspended", "state_accepted")
    event = _resume(run)
    assert event.event_type == "resume_verified", event.payload
    assert run.status == "running" and run.state["remaining"] == 1  # continued from the accepted state


def test_a_history_from_other_code_stays_refused_until_an_engineer_accepts_it(tenant):
    from runs.engine.resume import run_state_accept

    run = _suspended_demo(tenant)
    AgentEvent.objects.filter(run=run, event_type="step_completed").update(step_id="renamed_step")
    _edit_state_by_sql(run, remaining=3)  # changed too: the history refusal must not hide it
    _assert_refused(run, _resume(run), "history_mismatch")
    _assert_refused(run, _resume(run), "history_mismatch")
    change = run_state_accept(run_id=run.run_id, actor="user:eng", note="renamed in release 12")
    assert change.committed_digest != change.current_digest
    assert _resume(run).event_type == "resume_verified" and run.state["remaining"] == 2


def test_only_a_refused_changed_state_can_be_accepted(tenant):
    from core.errors import ApplicationError
    from runs.engine.resume import run_state_accept

    run = _suspended_demo(tenant)
    with pytest.raises(ApplicationError) as refused:
        run_state_accept(run_id=run.run_id, actor="user:eng", note="why not")
    assert (refused.value.code, refused.value.http_status) == ("state_not_refused", 409)
    assert not AgentEvent.objects.filter(run=run, event_type="state_accepted").exists()


def test_the_accept_state_api_is_for_engineers_with_a_note(tenant):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from rest_framework.test import APIClient

    from console.models import Membership
    from core.api_auth import api_key_create

    run = _suspended_demo(tenant)
    _edit_state_by_sql(run, remaining=2)
    _assert_refused(run, _resume(run), "state_digest_mismatch")
    url = f"/api/v1/runs/{run.run_id}/accept-state"
    users = get_user_model().objects
    clients = {}
    for role in ("support", "engineer"):
        user = users.create_user(f"{role}-staff", password="pw-for-tests", is_staff=True)
        user.groups.add(Group.objects.get_or_create(name=role)[0])
        Membership.objects.create(user=user, tenant=tenant)
        clients[role] = APIClient()
        clients[role].force_authenticate(user)
    denied = clients["support"].post(url, {"note": "looks fine"}, format="json")
    assert denied.status_code == 403 and "engineer role" in denied.content.decode(), denied.content
    assert clients["engineer"].post(url, {}, format="json").status_code == 400
    reader = APIClient()
    reader.credentials(
        HTTP_AUTHORIZATION=f"Bearer {api_key_create(tenant=tenant, name='r', scope='read').plaintext}"
    )
    assert reader.post(url, {"note": "x"}, format="json").status_code == 403
    assert not AgentEvent.objects.filter(run=run, event_type="state_accepted").exists()
    done = clients["engineer"].post(url, {"note": "set by hand on purpose"}, format="json")
    assert done.status_code == 200, done.content
    body = done.json()
    assert body["refused_code"] == "state_digest_mismatch" and body["digest_before"] != body["digest_after"]
    assert body["run"]["suspend_reason"] == "state_accepted"
    assert _resume(run).event_type == "resume_verified"
    schema = clients["engineer"].get("/api/schema/", HTTP_ACCEPT="application/json").content.decode()
    assert "/api/v1/runs/{run_id}/accept-state" in schema
