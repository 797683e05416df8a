"""What a move writes, beside its statement: the commit statement's parameters for a lease holder's
move, and the webhook event a run's new status derives (the outbox row is written by the same
statement)."""

from __future__ import annotations

import json
from typing import Any

from core.digests import canonical_json
from runs.kernel import moves as m

TERMINAL = ("completed", "failed", "cancelled")


def json_loaded(value: Any) -> Any:
    # Django registers jsonb to load as text on its connections; decode here.
    return json.loads(value) if isinstance(value, str | bytes) else value


def json_or_none(value: Any) -> str | None:
    return None if value is None else canonical_json(value)


# --- webhooks: which event of a move a subscriber hears of --------------------------------------------

_WEBHOOK_SUSPENSIONS = {
    "approval_required": "run.suspended.approval",
    "reconciliation_required": "run.suspended.reconciliation",
}


def webhook_event_type(*, status: str, suspend_reason: str | None) -> str | None:
    """The webhook event type of a run entering `status` (None: no subscriber is told)."""
    if status == "suspended":
        return _WEBHOOK_SUSPENSIONS.get(suspend_reason or "")
    return {"completed": "run.completed", "failed": "run.failed"}.get(str(status))


def webhook_params(status: str, reason: str | None, result: Any = None) -> dict[str, Any]:
    """The outbox's parameters of a statement moving a run into `status`."""
    event = webhook_event_type(status=status, suspend_reason=reason)
    if (
        event == "run.failed" and reason is None and isinstance(result, dict)
    ):  # a failure's reason is its code
        reason = result.get("code")
    return {"webhook": event, "webhook_status": str(status), "webhook_reason": reason}


# --- a lease holder's moves: the step commit ----------------------------------------------------------


def commit_params(move: m.WorkerMove) -> dict[str, Any]:
    """The commit statement's parameters for a lease holder's move."""
    held = move.held
    base: dict[str, Any] = {
        "run_id": held.run_id,
        "tenant_id": held.tenant_id,
        "expected": held.revision,
        "epoch": held.epoch,
        "owner": held.owner,
        "state": move.state.json,
        "digest": move.state.digest,
        "attempt": held.attempt,
        "payload": canonical_json(move.payload),
        "suspend_reason": None,
        "suspend_detail": "",
        "result": None,
        "release": True,
        "reset_attempt": True,
        "retry_in": 0.0,
        "schema": None,
        "event_state": True,
        "resume_at_wake": False,
        "step_id": None,
    }
    if isinstance(move, m.StepCommitted):
        return {**base, "next_step": move.next_step, "status": "running", "event_type": move.event_type,
                "step_id": move.step_id, "release": not move.keep_lease}  # fmt: skip
    if isinstance(move, m.Suspended):
        timer = move.wake_in is not None
        return {**base, "next_step": move.resume_at, "status": "suspended", "event_type": "run_suspended",
                "step_id": move.step_id, "suspend_reason": move.reason, "suspend_detail": move.detail,
                # a suspension Keeper decides keeps the attempt count; a step's own starts afresh
                "reset_attempt": move.step_id is not None,
                "retry_in": move.wake_in or 0.0, "resume_at_wake": timer}  # fmt: skip
    if isinstance(move, m.Completed):
        return {**base, "next_step": None, "status": "completed", "event_type": "run_completed",
                "step_id": move.step_id, "result": json_or_none(move.result)}  # fmt: skip
    if isinstance(move, m.Failed):
        failure = {"code": move.code, "detail": move.detail}
        return {**base, "next_step": None, "status": "failed", "event_type": "run_failed",
                "step_id": move.step_id, "result": canonical_json(failure)}  # fmt: skip
    if isinstance(move, m.StepErrored):
        if move.retry_in is None:
            return {**base, "next_step": move.step_id, "status": "suspended", "event_type": "step_error",
                    "step_id": move.step_id, "suspend_reason": "step_error", "suspend_detail": move.detail,
                    "reset_attempt": False}  # fmt: skip
        return {**base, "next_step": move.step_id, "status": "running", "event_type": "step_error",
                "step_id": move.step_id, "reset_attempt": False, "retry_in": move.retry_in}  # fmt: skip
    if isinstance(move, m.ResumeVerified):
        return {**base, "next_step": move.next_step, "status": "running", "event_type": "resume_verified",
                "release": False, "reset_attempt": False}  # fmt: skip
    if isinstance(move, m.ResumeRefused):
        return {**base, "next_step": move.next_step, "status": "suspended", "event_type": "resume_refused",
                "suspend_reason": move.reason, "suspend_detail": move.detail, "reset_attempt": False,
                "digest": move.trusted_digest,
                "event_state": move.trusted_digest == move.state.digest}  # fmt: skip
    if isinstance(move, m.StateMigrated):
        return {**base, "next_step": move.next_step, "status": "running", "event_type": "state_migrated",
                "release": False, "reset_attempt": False, "schema": move.to_version}  # fmt: skip
    raise TypeError(f"not a lease holder's move: {type(move).__name__}")
