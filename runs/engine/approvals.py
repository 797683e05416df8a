"""Approvals: a person's decision on one exact request (bound by digest), valid until it expires."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.errors import Conflict, InvalidInput, NotFound
from core.security import visible_text
from core.tenancy import tenant_of_call
from runs.engine.dispatch import run_enqueue_on_commit
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import InvalidTransition, SubjectErased
from runs.kernel.models import SUBJECT_ERASED, AgentRun, Approval, ApprovalStatus, RunStatus


class ApprovalNotPending(Conflict):
    code = "approval_not_pending"


class ApprovalExpired(Conflict):
    code = "approval_expired"


@dataclass(frozen=True)
class ApprovalCheck:
    """What the approving step may do: `use` an approval, `wait` for one, or stop as `rejected`."""

    verdict: str
    approval: Approval
    reason: str = ""
    detail: str = ""


@tenant_of_call
def approval_check(
    *,
    run_id: UUID,
    tenant_id: UUID,
    step_id: str,
    request: dict[str, Any],
    request_digest: str,
    reasons: list[str],
    actor: str,
) -> ApprovalCheck:
    """Decide from the run's approvals whether the request is approved now, and ask when it is not.

    An approval is used only if it is approved, unexpired and for this very digest. An expired or
    mismatched one is marked and a new pending approval is created, with the reason for the wait.
    Calling this again (a retried step) reuses the pending approval instead of creating another.
    """
    now = timezone.now()
    with transaction.atomic():
        latest = Approval.objects.select_for_update().filter(run_id=run_id).order_by("-created_at").first()
        reason, detail = "approval_required", "waiting for a person to approve the request"
        if latest is not None:
            if latest.request_digest != request_digest:
                if latest.status == ApprovalStatus.PENDING:
                    _close(latest, ApprovalStatus.EXPIRED, actor, REPLACED_NOTE, now)
                reason = "approval_digest_mismatch"
                detail = f"approval {latest.approval_id} was for request {latest.request_digest}, not {request_digest}"
            elif latest.expires_at <= now and latest.status in (
                ApprovalStatus.PENDING,
                ApprovalStatus.APPROVED,
            ):
                if latest.status == ApprovalStatus.PENDING:
                    _close(latest, ApprovalStatus.EXPIRED, actor, "expired before a decision", now)
                reason = "approval_expired"
                detail = f"approval {latest.approval_id} expired at {latest.expires_at.isoformat()}"
            elif latest.status == ApprovalStatus.APPROVED:
                return ApprovalCheck("use", latest)
            elif latest.status == ApprovalStatus.REJECTED:
                return ApprovalCheck("rejected", latest, "approval_rejected", latest.note)
            elif latest.status == ApprovalStatus.PENDING:
                return ApprovalCheck("wait", latest, reason, detail)
        try:
            with transaction.atomic():
                pending = Approval.objects.create(
                    tenant_id=tenant_id,
                    run_id=run_id,
                    step_id=step_id,
                    request=request,
                    request_digest=request_digest,
                    reasons=reasons,
                    expires_at=now + timedelta(seconds=settings.KEEPER_APPROVAL_TTL),
                )
        except IntegrityError:  # another attempt of this step created it a moment ago
            pending = Approval.objects.get(run_id=run_id, status=ApprovalStatus.PENDING)
    return ApprovalCheck("wait", pending, reason, detail)


def approval_grant_automatically(*, approval: Approval, policy: str) -> Approval:
    """A policy (not a person) approves a pending request, e.g. a small amount; recorded the same way."""
    _close(approval, ApprovalStatus.APPROVED, f"policy:{policy}", "approved by policy", timezone.now())
    return approval


def _close(approval: Approval, status: str, actor: str, note: str, now: Any) -> None:
    approval.status, approval.decided_by, approval.decided_at, approval.note = status, actor, now, note
    approval.save(update_fields=["status", "decided_by", "decided_at", "note"])


REPLACED_NOTE = "request changed"


def _not_pending(approval: Approval) -> ApprovalNotPending:
    """Why a decision cannot be taken: decided, or (closed as expired) out of time or replaced by an
    approval of the changed request."""
    if approval.status == ApprovalStatus.EXPIRED and approval.note == REPLACED_NOTE:
        why = "was replaced: the run's request changed, and a new approval asks about the new one"
    elif approval.status == ApprovalStatus.EXPIRED and approval.note.startswith("closed: "):
        why = f"was {approval.note}"  # by its run (runs migration 0028's trigger)
    else:
        why = f"is {approval.status}"
    return ApprovalNotPending(
        f"approval {approval.approval_id} {why}",
        details={"status": approval.status, "replaced": approval.note == REPLACED_NOTE},
    )


# The reasons a run waits for its approval with (approval_check's).
_WAITING = ("approval_required", "approval_expired", "approval_digest_mismatch")


def _ask_again(approval: Approval, actor: str) -> None:
    """The run of an approval that lapsed undecided goes back to its approving step, which asks for a
    new one, as the refusal says: otherwise the run would wait on nothing."""
    run = AgentRun.objects.filter(run_id=approval.run_id).first()
    if run is None or run.status != RunStatus.SUSPENDED or run.suspend_reason not in _WAITING:
        return  # waiting for something else (a person's reconciliation, a signal), or erased
    payload = {"approval_id": str(approval.approval_id), "request_digest": approval.request_digest}
    seq = apply(
        m.StatusChanged(
            run_id=run.run_id,
            tenant_id=run.tenant_id,
            from_statuses=(RunStatus.SUSPENDED,),
            to_status=RunStatus.SUSPENDED,
            event_type="approval_expired",
            actor=actor,
            payload=payload,
            expected_revision=run.state_revision,
            request_resume=True,
        )
    )
    if seq is not None:
        run_enqueue_on_commit(run_id=run.run_id)


def _decide(*, approval_id: UUID, actor: str, note: str, status: str) -> Approval:
    if not actor:
        raise InvalidInput("a decision needs the person who made it", code="actor_required")
    with transaction.atomic():
        approval = Approval.objects.select_for_update().filter(approval_id=approval_id).first()
        if approval is None:
            raise NotFound(f"no approval {approval_id}", code="approval_not_found")
        if approval.status != ApprovalStatus.PENDING:
            raise _not_pending(approval)
        now = timezone.now()
        expired = approval.expires_at <= now
        if expired:  # committed: the expiry is a fact, and the run asks for a new approval
            _close(approval, ApprovalStatus.EXPIRED, actor, "expired before a decision", now)
            _ask_again(approval, actor)
    if expired:
        raise ApprovalExpired(
            f"approval {approval_id} expired at {approval.expires_at.isoformat()}; the run asks for a new one"
        )
    with transaction.atomic():
        approval = Approval.objects.select_for_update().get(approval_id=approval_id)
        if approval.status != ApprovalStatus.PENDING:
            raise _not_pending(approval)
        _close(approval, status, actor, note, timezone.now())
        payload = {
            "approval_id": str(approval_id),
            "decision": status,
            "note": note,
            "request_digest": approval.request_digest,
        }
        for _ in range(3):  # the run moved between the read and the statement: read it again
            run = AgentRun.objects.get(run_id=approval.run_id)
            seq = apply(_decision_recorded(run, actor, status, payload))
            if seq is not None or run.status not in (RunStatus.RUNNING, RunStatus.SUSPENDED):
                break
        if seq is None and run.suspend_reason == SUBJECT_ERASED:
            raise SubjectErased(
                f"run {run.run_id} will not continue: its subject was erased; nothing to approve"
            )
        if seq is None:
            raise InvalidTransition(f"run {run.run_id} is {run.status}, not waiting for this approval")
        run_enqueue_on_commit(run_id=run.run_id)
    return approval


def _decision_recorded(run: AgentRun, actor: str, status: str, payload: dict[str, Any]) -> m.StatusChanged:
    """A person's decision on the run's approval, as the run's event.

    A suspended run stays suspended with a resume request: a worker verifies the approval (unexpired,
    same digest) among the other resume checks before the run continues. A run still running (its step
    asked for the approval and has not suspended yet) is taken from its worker: the step runs again
    and finds the decision, so a decision made early is kept and used, never refused."""
    waiting = run.status == RunStatus.SUSPENDED
    return m.StatusChanged(
        run_id=run.run_id,
        tenant_id=run.tenant_id,
        from_statuses=(RunStatus.SUSPENDED,) if waiting else (RunStatus.RUNNING,),
        to_status=RunStatus.SUSPENDED if waiting else RunStatus.RUNNING,
        event_type=f"approval_{status}",
        actor=actor,
        payload=payload,
        expected_revision=None if waiting else run.state_revision,
        request_resume=waiting,
    )


def approval_approve(*, approval_id: UUID, actor: str, note: str = "") -> Approval:
    """Approve a pending, unexpired request and let its run continue (it checks the digest again)."""
    return _decide(approval_id=approval_id, actor=actor, note=note, status=ApprovalStatus.APPROVED)


def approval_reject(*, approval_id: UUID, actor: str, note: str) -> Approval:
    if not visible_text(note):
        raise InvalidInput("a rejection needs a note", code="note_required")
    return _decide(approval_id=approval_id, actor=actor, note=note, status=ApprovalStatus.REJECTED)
