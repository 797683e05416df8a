"""Approvals are bound to a request digest and an expiry; stale ones are never used."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.errors import InvalidInput
from runs.engine.approvals import (
    ApprovalExpired,
    ApprovalNotPending,
    approval_approve,
    approval_check,
    approval_reject,
)
from runs.engine.runs import run_start, run_suspend
from runs.kernel.models import AgentEvent, Approval

pytestmark = pytest.mark.django_db
REQUEST = {"order_id": "o-1", "amount_minor": 500, "currency": "EUR"}


@pytest.fixture
def run(tenant):
    run = run_start(tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test").run
    run_suspend(run_id=run.run_id, actor="test", reason="approval_required")
    return run


def _check(run, digest="sha256:a"):
    return approval_check(
        run_id=run.run_id,
        tenant_id=run.tenant_id,
        step_id="approve",
        request=REQUEST,
        request_digest=digest,
        reasons=["delivered"],
        actor="w1",
    )


def test_a_retried_step_reuses_the_pending_approval(run):
    first, again = _check(run), _check(run)
    assert (
        first.verdict == again.verdict == "wait" and first.approval.approval_id == again.approval.approval_id
    )
    assert Approval.objects.count() == 1


def test_an_approved_request_is_used_and_the_decision_is_an_event(run):
    pending = _check(run).approval
    approval_approve(approval_id=pending.approval_id, actor="user:sam", note="ok")
    run.refresh_from_db()
    assert run.status == "suspended" and run.resume_requested_at is not None  # verified by a worker next
    event = AgentEvent.objects.filter(run=run).order_by("-seq").first()
    assert (event.event_type, event.actor, event.payload["request_digest"]) == (
        "approval_approved",
        "user:sam",
        "sha256:a",
    )
    assert _check(run).verdict == "use"


def test_an_approval_for_another_digest_is_never_used(run):
    pending = _check(run, "sha256:a").approval
    approval_approve(approval_id=pending.approval_id, actor="user:sam")
    changed = _check(run, "sha256:b")
    assert (changed.verdict, changed.reason) == ("wait", "approval_digest_mismatch")
    assert changed.approval.request_digest == "sha256:b" and changed.approval.status == "pending"


def test_approving_an_approval_replaced_by_a_changed_request_says_it_was_replaced(run):
    """Not "is expired" while its expiry is a day away."""
    first = _check(run, "sha256:a").approval
    _check(run, "sha256:b")
    with pytest.raises(ApprovalNotPending) as refused:
        approval_approve(approval_id=first.approval_id, actor="user:sam")
    assert "was replaced: the run's request changed" in refused.value.message
    assert refused.value.details == {"status": "expired", "replaced": True}


def test_a_cancelled_runs_pending_approval_is_closed_with_it(run):
    """Not left pending in the support inbox, its buttons answering 409."""
    from runs.engine.runs import run_cancel
    from runs.engine.selectors.side_effects import approval_pending_list

    pending = _check(run).approval
    assert [a.approval_id for a in approval_pending_list(tenant_ids=[run.tenant_id])] == [pending.approval_id]
    run_cancel(run_id=run.run_id, actor="user:sam", note="customer withdrew")
    pending.refresh_from_db()
    assert (pending.status, pending.decided_by, pending.note) == (
        "expired",
        "keeper",
        "closed: the run was cancelled",
    )
    assert list(approval_pending_list(tenant_ids=[run.tenant_id])) == []
    with pytest.raises(ApprovalNotPending) as refused:
        approval_approve(approval_id=pending.approval_id, actor="user:sam")
    assert "was closed: the run was cancelled" in refused.value.message


def test_an_expired_approval_is_never_used_and_a_new_one_is_requested(run):
    pending = _check(run).approval
    approval_approve(approval_id=pending.approval_id, actor="user:sam")
    Approval.objects.filter(pk=pending.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    check = _check(run)
    assert (check.verdict, check.reason) == ("wait", "approval_expired")
    assert check.approval.approval_id != pending.approval_id


def test_approving_after_expiry_is_refused_and_recorded(run):
    pending = _check(run).approval
    Approval.objects.filter(pk=pending.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    with pytest.raises(ApprovalExpired):
        approval_approve(approval_id=pending.approval_id, actor="user:sam")
    pending.refresh_from_db()
    assert pending.status == "expired"
    run.refresh_from_db()
    # The run goes back to its approving step, which asks again (it waited on nothing before).
    assert run.status == "suspended" and run.resume_requested_at is not None
    assert AgentEvent.objects.filter(run=run, event_type="approval_expired").count() == 1
    again = _check(run)
    assert again.verdict == "wait" and again.approval.approval_id != pending.approval_id
    assert again.approval.status == "pending"


def test_reject_needs_a_note_and_a_decision_happens_once(run):
    pending = _check(run).approval
    with pytest.raises(InvalidInput):
        approval_reject(approval_id=pending.approval_id, actor="user:sam", note="")
    approval_reject(approval_id=pending.approval_id, actor="user:sam", note="not eligible")
    with pytest.raises(ApprovalNotPending):
        approval_approve(approval_id=pending.approval_id, actor="user:sam")
    assert _check(run).verdict == "rejected"


@pytest.mark.django_db(transaction=True)
def test_an_erased_subjects_pending_approval_is_closed_by_the_erasure(tenant):
    from erasure.services import erasure_execute, erasure_request_create

    run = run_start(
        tenant=tenant, workflow_name="demo.countdown", input={"n": 1}, actor="test", subject="cust-erase-me"
    ).run
    run_suspend(run_id=run.run_id, actor="test", reason="approval_required")
    pending = _check(run).approval
    request = erasure_request_create(
        tenant=tenant, subject_id="cust-erase-me", requested_by="user:compliance"
    )
    done = erasure_execute(tenant_id=tenant.tenant_id, request_id=request.request_id)
    assert done.status == "completed", done.receipt
    pending.refresh_from_db()
    assert (pending.status, pending.note) == ("expired", "closed: the subject of the run was erased")
