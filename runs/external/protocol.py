"""The outside worker's protocol: claim a lease, commit a step, heartbeat, release, run operations.

Every write goes through the engine's own statements (store.lease_acquire, commit_step, lease_renew,
lease_release, and the operation protocol of runs.engine.operations); a lease travels to the worker
as an opaque token signed with SECRET_KEY, checked on every call before anything is read or written.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection

from core.digests import canonical_json, json_digest
from core.errors import ApplicationError, Conflict, InvalidInput, NotFound
from core.security import visible_text
from core.tenancy import tenant_bind
from runs.engine import store
from runs.engine.approvals import approval_check
from runs.engine.budgets import budgets_refusal, budgets_spend
from runs.engine.errors import InvalidState, SubjectErased
from runs.engine.models import (
    SUBJECT_ERASED,
    AgentEvent,
    AgentRun,
    Approval,
    ApprovalStatus,
    RunStatus,
    ToolOperation,
)
from runs.engine.operations import (
    operation_mark_failed,
    operation_mark_not_applied,
    operation_mark_started,
    operation_mark_succeeded,
    operation_mark_unknown,
    operation_prepare_once,
)
from runs.engine.registry import Workflow, registry
from runs.engine.resume import resume_event_payload, resume_verify
from runs.engine.state import state_encode
from runs.engine.store import LeaseGrant, OperationRow
from runs.external.models import ExternalWorkflow

MAX_WAIT_S = 30.0
RETRY_AFTER_MAX_S = 5  # a claim that could not wait comes back this soon at the latest
POLL_S = 0.5
MAX_TOKEN_AGE_S = 24 * 3600  # a lease token older than this is refused: claim again
_SALT = b"keeper.external.lease-token.v1"
_CANDIDATES = 10
# Suspend reasons only Keeper writes: a worker saying them would fake an erasure, a fork, a refusal,
# a spent budget, an operation in doubt or a LangGraph thread (found from outside: a worker could put
# a run in the reconciliation inbox with no operation in doubt).
RESERVED_REASONS = frozenset(
    {
        "subject_erased",
        "fork_not_started",
        "state_accepted",
        "state_digest_mismatch",
        "history_mismatch",
        "too_many_attempts",
        "budget_exhausted",
        "deadline_passed",
        "step_error",
        "langgraph_thread",
        "langgraph_interrupt",
        "langgraph_answered",
        # resume verification's refusals (runs/engine/resume.py), forks and child runs
        "approval_missing",
        "approval_digest_mismatch",
        "approval_expired",
        "unsupported_checkpoint",
        "event_seq_gap",
        "source_changed",
        "tool_contract_changed",
        "tenant_unknown",
        "workflow_version_unavailable",
        "fork",
        "fork_abandoned",
        "child_run",
    }
)
# A run waits for an approval only when one is pending (the worker asks for it first: the approval
# call answers `wait`), and for a reconciliation only when one of its operations is in doubt (started
# or unknown): support's inbox never shows a run waiting for something that does not exist.
APPROVAL_REASON = "approval_required"
RECONCILIATION_REASON = "reconciliation_required"


class LeaseTokenInvalid(ApplicationError):
    """Forged, damaged, of another tenant or run, or too old: nothing was read or changed."""

    code = "invalid_lease_token"
    http_status = 403


class LeaseLost(Conflict):
    """The token's lease is no longer held (taken over, released, the run moved): nothing was written."""

    code = "lease_lost"


class StaleRevision(Conflict):
    code = "stale_revision"


# --- the lease token ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Lease:
    run_id: UUID
    tenant_id: UUID
    epoch: int
    owner: str
    issued_at: float


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _mac(body: str) -> str:
    key = hashlib.sha256(_SALT + settings.SECRET_KEY.encode()).digest()
    return _b64(hmac.new(key, body.encode("ascii"), hashlib.sha256).digest())


def lease_token_sign(
    *, run_id: UUID, tenant_id: UUID, epoch: int, owner: str, issued_at: float | None = None
) -> str:
    """`lt1.<body>.<mac>`: HMAC-SHA256 (key from SECRET_KEY) over run, tenant, epoch, owner and issue time."""
    claims = {
        "r": str(run_id),
        "t": str(tenant_id),
        "e": epoch,
        "o": owner,
        "i": int(issued_at or time.time()),
    }
    body = _b64(canonical_json(claims).encode())
    return f"lt1.{body}.{_mac(body)}"


def lease_token_verify(*, token: str, tenant_id: UUID, run_id: UUID) -> Lease:
    """The lease a token names, if Keeper signed it for this tenant and run and it is not too old."""
    # A token Keeper signed is ASCII; anything else is refused before its MAC is computed (which
    # encodes it as ASCII) or compared (compare_digest takes ASCII strings only).
    parts = token.split(".") if isinstance(token, str) and token.isascii() else []
    if len(parts) != 3 or parts[0] != "lt1" or not hmac.compare_digest(parts[2], _mac(parts[1])):
        raise LeaseTokenInvalid("the lease token is not one Keeper signed (forged or damaged)")
    claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    if claims["t"] != str(tenant_id):
        raise LeaseTokenInvalid("the lease token belongs to another tenant", code="lease_token_other_tenant")
    if claims["r"] != str(run_id):
        raise LeaseTokenInvalid(
            f"the lease token is for run {claims['r']}, not {run_id}", code="lease_token_other_run"
        )
    if time.time() - claims["i"] > MAX_TOKEN_AGE_S:
        raise LeaseTokenInvalid(
            f"the lease token is older than {MAX_TOKEN_AGE_S}s; claim the run again",
            code="lease_token_expired",
        )
    return Lease(run_id, tenant_id, int(claims["e"]), str(claims["o"]), float(claims["i"]))


# --- claim ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    grant: LeaseGrant
    token: str
    revision: int
    state: dict[str, Any]
    verified: str | None  # the trigger of the resume verification that ran before the grant
    operations_in_doubt: list[dict[str, Any]] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)


MAX_SIGNALS_SHOWN = 100


def _signals(run_id: UUID) -> list[dict[str, Any]]:
    """The run's received signals, oldest first (the newest MAX_SIGNALS_SHOWN): the worker keeps the
    seq of the last one it acted on in its state, as an authored step's cursor does."""
    events = AgentEvent.objects.filter(run_id=run_id, event_type="signal_received").order_by("-seq")
    return [
        {
            "seq": e.seq,
            "signal": e.payload.get("signal"),
            "payload": e.payload.get("payload"),
            "at": e.created_at,
        }
        for e in reversed(events[:MAX_SIGNALS_SHOWN])
    ]


def _in_doubt(run_id: UUID) -> list[dict[str, Any]]:
    ops = ToolOperation.objects.filter(run_id=run_id, status__in=["started", "unknown"]).order_by(
        "created_at"
    )
    return [
        {"operation_id": o.operation_id, "tool_name": o.tool_name, "status": o.status, "attempts": o.attempts}
        for o in ops
    ]


def _suspend(grant: LeaseGrant, revision: int, reason: str, detail: str) -> None:
    encoded = state_encode(grant.state)
    store.commit_step(
        run_id=grant.run_id,
        expected_revision=revision,
        epoch=grant.epoch,
        owner=grant.owner,
        state_json=encoded.json,
        state_digest=encoded.digest,
        next_step=grant.next_step,
        status=RunStatus.SUSPENDED,
        event_type="run_suspended",
        step_id=None,
        attempt=grant.attempt,
        payload_json=canonical_json(
            {
                "workflow_version": grant.workflow_version,
                "step": grant.next_step,
                "reason": reason,
                "detail": detail,
            }
        ),
        suspend_reason=reason,
        suspend_detail=detail,
        reset_attempt=False,
    )


def _grant_checked(grant: LeaseGrant) -> Claim | None:
    """Resume verification (as steps.py does for Keeper's workers) and the attempt and budget limits.

    None if the run was suspended instead (the refusal or the limit is written as its event).
    """
    revision, state, trigger = grant.revision, dict(grant.state), None
    if grant.status == RunStatus.SUSPENDED or grant.previous_owner is not None:
        verification = resume_verify(grant=grant)
        current = state_encode(state)
        payload = resume_event_payload(grant=grant, verification=verification)
        trigger = payload["trigger"]
        refusal = verification.refusal
        if refusal is not None:
            trusted = verification.committed_digest or current.digest
            store.commit_step(
                run_id=grant.run_id,
                expected_revision=revision,
                epoch=grant.epoch,
                owner=grant.owner,
                state_json=current.json,
                state_digest=trusted,
                event_state=trusted == current.digest,
                next_step=grant.next_step,
                status=RunStatus.SUSPENDED,
                event_type="resume_refused",
                step_id=None,
                attempt=grant.attempt,
                payload_json=canonical_json(payload),
                suspend_reason=refusal.code,
                suspend_detail=refusal.detail,
                reset_attempt=False,
            )
            return None
        state = verification.state
        verified = state_encode(state)
        seq = store.commit_step(
            run_id=grant.run_id,
            expected_revision=revision,
            epoch=grant.epoch,
            owner=grant.owner,
            state_json=verified.json,
            state_digest=verified.digest,
            next_step=grant.next_step,
            status=RunStatus.RUNNING,
            event_type="resume_verified",
            step_id=None,
            attempt=grant.attempt,
            payload_json=canonical_json(payload),
            release=False,
            reset_attempt=False,
        )
        if seq is None:  # a person or a message moved it meanwhile: leave it to the next claim
            store.lease_release(run_id=grant.run_id, owner=grant.owner, epoch=grant.epoch)
            return None
        revision = seq
    if grant.attempt > settings.KEEPER_MAX_ATTEMPTS:
        detail = (
            f"step {grant.next_step!r} was claimed {grant.attempt - 1} times without a commit "
            f"(KEEPER_MAX_ATTEMPTS={settings.KEEPER_MAX_ATTEMPTS})"
        )
        _suspend(grant, revision, "too_many_attempts", detail)
        return None
    if over := budgets_refusal(state.get("budgets")):  # as for Keeper's own workers: budgets and deadline
        _suspend(grant, revision, *over)
        return None
    token = lease_token_sign(
        run_id=grant.run_id, tenant_id=grant.tenant_id, epoch=grant.epoch, owner=grant.owner
    )
    return Claim(grant, token, revision, state, trigger, _in_doubt(grant.run_id), _signals(grant.run_id))


def _claim_once(*, tenant_id: UUID, workflows: list[str], owner: str, ttl: float) -> Claim | None:
    with tenant_bind(tenant_id):
        for run_id in store.external_claimable(tenant_id=tenant_id, names=workflows, limit=_CANDIDATES):
            grant = store.lease_acquire(run_id=run_id, owner=owner, ttl=ttl, external=True)
            if grant is None:  # another worker won it
                continue
            claim = _grant_checked(grant)
            if claim is not None:
                return claim
    return None


def worker_owner(*, key_prefix: str, worker_id: str) -> str:
    """The lease owner (and event actor) of one claim: the key, the worker's name and a nonce."""
    return f"external:kp_{key_prefix}:{worker_id}:{secrets.token_hex(4)}"


_waiting = 0  # claims of this process waiting now (claim_wait_slot)
_waiting_lock = threading.Lock()


@contextmanager
def claim_wait_slot(wait_seconds: float) -> Iterator[bool]:
    """Whether this claim may wait for a run: each waiting claim holds a web thread (gunicorn's gthread
    workers serve 4 requests at once by default), so at most KEEPER_CLAIM_WAITERS of one process wait
    at once. Found from outside: 8 idle outside workers held every thread, and another tenant's
    request took 18 s. A claim past them looks once; with nothing ready the API answers 204 with
    Retry-After, which the Python client waits out."""
    global _waiting
    with _waiting_lock:
        allowed = wait_seconds <= 0 or _waiting < settings.KEEPER_CLAIM_WAITERS
        taken = allowed and wait_seconds > 0
        if taken:
            _waiting += 1
    try:
        yield allowed
    finally:
        if taken:
            with _waiting_lock:
                _waiting -= 1


def retry_after(wait_seconds: float) -> int:
    """The seconds a claim that could not wait is told to wait before it claims again."""
    return max(1, min(math.ceil(wait_seconds), RETRY_AFTER_MAX_S))


def external_claim(
    *, tenant_id: UUID, workflows: list[str], owner: str, wait_seconds: float, ttl: float | None = None
) -> Claim | None:
    """A lease on the oldest claimable run of these workflows, waiting up to `wait_seconds` for one.

    Between polls no transaction is open and the connection is given back (a long poll holds none).
    """
    unknown = sorted(
        set(workflows)
        - set(ExternalWorkflow.objects.filter(name__in=workflows).values_list("name", flat=True))
    )
    if unknown:
        raise NotFound(f"no external workflow {', '.join(unknown)} for this tenant", code="unknown_workflow")
    lease_ttl = float(ttl if ttl is not None else settings.KEEPER_LEASE_TTL)
    deadline = time.monotonic() + max(0.0, min(wait_seconds, MAX_WAIT_S))
    while True:
        claim = _claim_once(tenant_id=tenant_id, workflows=workflows, owner=owner, ttl=lease_ttl)
        remaining = deadline - time.monotonic()
        if claim is not None or remaining <= 0:
            return claim
        if not connection.in_atomic_block:
            connection.close()
        time.sleep(min(POLL_S, remaining))


# --- the calls under a lease ----------------------------------------------------------------------


def _run(lease: Lease) -> AgentRun:
    run = AgentRun.objects.filter(run_id=lease.run_id).first()
    if run is None:
        raise NotFound(f"no run {lease.run_id}", code="run_not_found")
    return run


def _lost(run: AgentRun, lease: Lease) -> LeaseLost:
    if run.lease_epoch != lease.epoch:
        why = f"another worker took it over (epoch {run.lease_epoch}, this token's is {lease.epoch})"
    elif run.lease_owner is None:
        why = f"its lease (epoch {lease.epoch}) was given back by a commit or a release; claim it again"
    else:
        why = f"it is {run.status}, not running under this token's lease (epoch {lease.epoch})"
    return LeaseLost(
        f"run {run.run_id} is no longer leased to this token: {why}; it is {run.status} at revision "
        f"{run.state_revision}: nothing was written",
        details={
            "current_revision": run.state_revision,
            "status": run.status,
            "lease_epoch": run.lease_epoch,
        },
    )


def _held(lease: Lease) -> AgentRun:
    run = _run(lease)
    if (
        run.lease_epoch != lease.epoch
        or run.lease_owner != lease.owner
        or run.status
        not in (
            RunStatus.RUNNING,
            RunStatus.SUSPENDED,
        )
    ):
        raise _lost(run, lease)
    return run


def external_heartbeat(*, lease: Lease, ttl: float | None = None) -> Any:
    with tenant_bind(lease.tenant_id):
        expires = store.lease_renew(
            run_id=lease.run_id,
            owner=lease.owner,
            epoch=lease.epoch,
            ttl=float(ttl if ttl is not None else settings.KEEPER_LEASE_TTL),
        )
        if expires is None:
            raise _lost(_run(lease), lease)
        return expires


def external_release(*, lease: Lease, retry_in: float = 0.0) -> None:
    with tenant_bind(lease.tenant_id):
        if not store.lease_release(
            run_id=lease.run_id, owner=lease.owner, epoch=lease.epoch, retry_in=retry_in
        ):
            raise _lost(_run(lease), lease)


@dataclass(frozen=True)
class Outcome:
    """What the step decided: exactly one of next_step, suspend, complete, fail."""

    kind: str  # next | suspend | complete | fail
    next_step: str | None = None
    reason: str = ""
    detail: str = ""
    result: Any = None


@dataclass(frozen=True)
class Committed:
    run_id: UUID
    seq: int
    revision: int
    status: str
    next_step: str | None
    event_type: str
    replayed: bool


def _workflow(run: AgentRun) -> Workflow:
    return registry.get(run.workflow_name, run.workflow_version)


def _commit_args(run: AgentRun, workflow: Workflow, outcome: Outcome) -> dict[str, Any]:
    step = run.next_step
    if outcome.kind == "next":
        if workflow.step(outcome.next_step or "") is None:
            raise InvalidInput(
                f"{workflow.name} {workflow.version} has no step {outcome.next_step!r}", code="unknown_step"
            )
        return {"status": RunStatus.RUNNING, "event_type": "step_completed", "next_step": outcome.next_step}
    if outcome.kind == "suspend":
        if outcome.reason in RESERVED_REASONS:
            raise InvalidInput(
                f"suspend reason {outcome.reason!r} is Keeper's own; choose another", code="reserved_reason"
            )
        if (
            outcome.reason == APPROVAL_REASON
            and not Approval.objects.filter(run_id=run.run_id, status=ApprovalStatus.PENDING).exists()
        ):
            raise InvalidInput(
                "approval_required needs a pending approval of this run: ask for it first (the approval "
                "call answers wait), then commit this suspend",
                code="approval_not_requested",
            )
        if outcome.reason == RECONCILIATION_REASON and not _in_doubt(run.run_id):
            raise InvalidInput(
                "reconciliation_required needs an operation of this run in doubt (started, or reported "
                "unknown); report the outcome you know instead",
                code="nothing_in_doubt",
            )
        resume_at = outcome.next_step or step
        if workflow.step(resume_at or "") is None:
            raise InvalidInput(
                f"{workflow.name} {workflow.version} has no step {resume_at!r}", code="unknown_step"
            )
        return {
            "status": RunStatus.SUSPENDED,
            "event_type": "run_suspended",
            "next_step": resume_at,
            "suspend_reason": outcome.reason,
            "suspend_detail": outcome.detail,
        }
    if doubt := _in_doubt(run.run_id):
        # A run that ends with an operation in doubt would keep it there for ever: no inbox asks a
        # person about a finished run's refund, and its subject's erasure keeps the key (found from
        # outside: the receipt never became clean).
        raise InvalidInput(
            f"{outcome.kind} with {len(doubt)} operation(s) of this run in doubt (started, or reported "
            "unknown): report each outcome first, or suspend with reconciliation_required for a person "
            "to settle them",
            code="operations_in_doubt",
            details={"operations_in_doubt": doubt},
        )
    if outcome.kind == "complete":
        return {
            "status": RunStatus.COMPLETED,
            "event_type": "run_completed",
            "next_step": None,
            "result_json": canonical_json(outcome.result),
        }
    failure = {"code": outcome.reason, "detail": outcome.detail}
    return {
        "status": RunStatus.FAILED,
        "event_type": "run_failed",
        "next_step": None,
        "result_json": canonical_json(failure),
    }


def external_commit(
    *,
    lease: Lease,
    expected_revision: int,
    state: Any,
    outcome: Outcome,
    payload: dict[str, Any],
    spent: dict[str, float],
    keep_lease: bool = False,
) -> Committed:
    """The step's result in one statement (store.commit_step), fenced by revision and lease epoch.

    The same commit sent again (the answer was lost) gets the first answer back with `replayed`;
    anything else that does not match is a 409 with the run's current revision, and nothing is written.
    """
    with tenant_bind(lease.tenant_id):
        run = _run(lease)
        if not isinstance(state, dict):
            raise InvalidState(f"state must be a JSON object, not {type(state).__name__}")
        digest = json_digest(
            {
                "revision": expected_revision,
                "state": state,
                "outcome": outcome.__dict__,
                "payload": payload,
                "spent": spent,
            }
        )
        replay = _replayed(run, lease, expected_revision, digest)
        if replay is not None:
            return replay
        workflow = _workflow(run)
        args = _commit_args(run, workflow, outcome)
        budgets = run.state.get("budgets") if isinstance(run.state, dict) else None
        full = (
            {**state, "budgets": budgets_spend(budgets, spent)} if isinstance(budgets, dict) else dict(state)
        )
        encoded = state_encode(full)
        base = {"workflow_version": run.workflow_version, "step": run.next_step, "spent": spent}
        extra = {"next_step": args["next_step"]} if outcome.kind == "next" else {}
        if outcome.kind == "suspend":
            extra = {"reason": outcome.reason, "detail": outcome.detail, "resume_at": args["next_step"]}
        if outcome.kind == "fail":
            extra = {"code": outcome.reason, "detail": outcome.detail}
        seq = store.commit_step(
            run_id=run.run_id,
            expected_revision=expected_revision,
            epoch=lease.epoch,
            owner=lease.owner,
            state_json=encoded.json,
            state_digest=encoded.digest,
            step_id=run.next_step,
            attempt=run.attempt,
            payload_json=canonical_json({**payload, **base, **extra, "commit_digest": digest}),
            release=not (keep_lease and args["status"] == RunStatus.RUNNING),
            **args,
        )
        if seq is None:
            run = _run(lease)
            replay = _replayed(run, lease, expected_revision, digest)
            if replay is not None:
                return replay
            if run.state_revision != expected_revision:
                raise StaleRevision(
                    f"run {run.run_id} is at revision {run.state_revision}, not {expected_revision}: nothing was "
                    "written",
                    details={"current_revision": run.state_revision, "status": run.status},
                )
            raise _lost(run, lease)
        return Committed(run.run_id, seq, seq, args["status"], args["next_step"], args["event_type"], False)


def _replayed(run: AgentRun, lease: Lease, expected_revision: int, digest: str) -> Committed | None:
    """The answer of this very commit, if it was already written (by this lease, at this revision)."""
    event = AgentEvent.objects.filter(run_id=run.run_id, seq=expected_revision + 1, actor=lease.owner).first()
    if event is None or (event.payload or {}).get("commit_digest") != digest:
        return None
    status = {
        "step_completed": RunStatus.RUNNING,
        "run_suspended": RunStatus.SUSPENDED,
        "run_completed": RunStatus.COMPLETED,
        "run_failed": RunStatus.FAILED,
    }[event.event_type]
    return Committed(run.run_id, event.seq, event.seq, status, event.next_step, event.event_type, True)


# --- operations -----------------------------------------------------------------------------------

OUTCOMES = ("succeeded", "failed", "unknown", "not_applied")


def _operation_of(run: AgentRun, operation_id: str) -> ToolOperation:
    op = ToolOperation.objects.filter(operation_id=operation_id).first()
    if op is None or op.run_id not in (run.run_id, run.parent_run_id):
        raise NotFound(
            f"no operation {operation_id} on run {run.run_id}: prepare it first", code="operation_not_found"
        )
    return op


def external_operation_prepare(
    *, lease: Lease, operation_id: str, tool_name: str, tool_contract_version: str, request: dict[str, Any]
) -> OperationRow:
    """Prepared once per operation id (the idempotency key to send outside); the row as it is now."""
    with tenant_bind(lease.tenant_id):
        run = _held(lease)
        contract = registry.tool(tool_name)
        if contract is None or contract.version != tool_contract_version:
            raise InvalidInput(
                f"tool {tool_name} {tool_contract_version} is not declared by this workflow or by Keeper"
                + (f" (Keeper has {contract.version})" if contract else ""),
                code="unknown_tool",
            )
        return operation_prepare_once(
            tenant_id=lease.tenant_id,
            run_id=run.run_id,
            step_id=run.next_step or "",
            operation_id=operation_id,
            tool_name=tool_name,
            tool_contract_version=tool_contract_version,
            request=request,
            actor=lease.owner,
        )


def external_operation_started(*, lease: Lease, operation_id: str) -> OperationRow:
    """Only the current lease holder may start a side effect (checked in the same statement)."""
    with tenant_bind(lease.tenant_id):
        run = _held(lease)
        _operation_of(run, operation_id)
        return operation_mark_started(
            tenant_id=lease.tenant_id,
            operation_id=operation_id,
            actor=lease.owner,
            run_id=run.run_id,
            lease_epoch=lease.epoch,
        )


def external_operation_outcome(
    *, lease: Lease, operation_id: str, outcome: str, external_ref: str | None, result: Any, note: str
) -> OperationRow:
    """What the outside system answered. A timeout or a dropped connection is `unknown`, never `failed`;
    `not_applied` only after an authoritative lookup by the idempotency key said so."""
    with tenant_bind(lease.tenant_id):
        run = _run(lease)
        if run.suspend_reason == SUBJECT_ERASED or run.subject.startswith("erased:"):
            # (A run cancelled after the erasure keeps its erased subject, not the reason: found from
            # outside.)
            # An outcome may come after the lease is lost (the money's truth), but not into a run whose
            # subject was erased: its result and reference could carry them back after the receipt
            # (found from outside). A person settles it: the support inbox lists the operation.
            raise SubjectErased(
                f"run {run.run_id}'s subject was erased: nothing more is written to it; ask a person to "
                f"reconcile operation {operation_id} (the support inbox lists it)",
                details={"status": run.status, "suspend_reason": run.suspend_reason},
            )
        _operation_of(run, operation_id)
        ids = {"tenant_id": lease.tenant_id, "operation_id": operation_id, "actor": lease.owner}
        # After a lost lease, the outside system's answer still settles the operation, even one a
        # take-over's lookup found not applied meanwhile (found from outside: refused with 409, and
        # the sending worker's reference was lost).
        if outcome == "succeeded":
            return operation_mark_succeeded(
                **ids, external_ref=external_ref or "", result=result, note=note, late=True
            )
        if outcome == "failed":
            return operation_mark_failed(**ids, result=result, note=note, late=True)
        if outcome == "unknown":
            return operation_mark_unknown(**ids, note=note or "the worker could not tell")
        if outcome == "not_applied":
            if not visible_text(note):
                raise InvalidInput(
                    "not_applied needs a note saying which lookup said so", code="note_required"
                )
            return operation_mark_not_applied(**ids, note=note)
        raise InvalidInput(f"outcome must be one of {', '.join(OUTCOMES)}", code="invalid_outcome")


# --- approvals ------------------------------------------------------------------------------------


def external_approval_check(
    *, lease: Lease, request: dict[str, Any], reasons: list[str]
) -> tuple[str, Any, str, str]:
    """Ask for (or find) a person's approval of this exact request, as Keeper's own steps do.

    (verdict, approval, reason, detail): `use` it, `wait` (commit a suspend with this reason and keep
    the approval id and request digest in the state), or `rejected`.
    """
    with tenant_bind(lease.tenant_id):
        run = _held(lease)
        check = approval_check(
            run_id=run.run_id,
            tenant_id=lease.tenant_id,
            step_id=run.next_step or "",
            request=request,
            request_digest=json_digest(request),
            reasons=reasons,
            actor=lease.owner,
        )
        return check.verdict, check.approval, check.reason, check.detail
