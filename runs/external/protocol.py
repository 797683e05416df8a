"""The outside worker's protocol, the kernel's second driver: claim a lease, commit a step, heartbeat, release.

What a claim or a commit becomes is decided by the kernel (runs.kernel.decide), exactly as for
Keeper's own workers (runs.engine.steps): this module only reads, waits for the worker, and applies
the moves. A lease travels to the worker as a signed token (runs.external.tokens). A take-over whose
operations are in doubt, with tools only the worker can look up, waits for the worker's lookups
(`external_lookups`) before verification decides, so its events are those Keeper's worker writes.
"""

from __future__ import annotations

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
from django.utils import timezone

from core.db import wire
from core.digests import json_digest
from core.errors import Conflict, InvalidInput, NotFound
from core.tenancy import tenant_bind
from runs.conversations.procedures import run_completed_learn
from runs.engine.registry import Workflow, registry
from runs.engine.resume import WorkerLookups, resume_in_doubt, resume_verify
from runs.external.models import ExternalWorkflow
from runs.external.tokens import Lease, lease_token_sign
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.decide import Invalid, Proceed, Situation, Wait, decide_claim, decide_outcome
from runs.kernel.errors import InvalidState, UnknownWorkflow
from runs.kernel.models import AgentEvent, AgentRun, Approval, ApprovalStatus, RunStatus, ToolOperation
from runs.kernel.outcomes import Complete, Fail, Next, Suspend
from runs.kernel.records import Ending, LeaseGrant
from runs.kernel.state import state_encode

MAX_WAIT_S = 30.0
RETRY_AFTER_MAX_S = 5  # a claim that could not wait comes back this soon at the latest
POLL_S = 0.5
_CANDIDATES = 10
MAX_SIGNALS_SHOWN = 100


class LeaseLost(Conflict):
    """The token's lease is no longer held (taken over, released, the run moved): nothing was written."""

    code = "lease_lost"


class StaleRevision(Conflict):
    code = "stale_revision"


class LookupsRequired(Conflict):
    """The claim's operations in doubt wait for the worker's lookups before anything else."""

    code = "lookups_required"


class ResumeRefused(Conflict):
    code = "resume_refused"


@dataclass(frozen=True)
class Claim:
    grant: LeaseGrant
    token: str
    revision: int
    state: dict[str, Any]
    verified: str | None  # the trigger of the resume verification that ran before the grant
    operations_in_doubt: list[dict[str, Any]] = field(default_factory=list)
    signals: list[dict[str, Any]] = field(default_factory=list)
    lookups_needed: bool = False  # answer external_lookups before the step (the token says so too)


def _signals(run_id: UUID, tenant_id: UUID) -> list[dict[str, Any]]:
    """The run's received signals, oldest first (the newest MAX_SIGNALS_SHOWN): the worker keeps the
    seq of the last one it acted on in its state, as an authored step's cursor does."""
    events = AgentEvent.objects.filter(run_id=run_id, tenant_id=tenant_id, event_type="signal_received")
    return [
        {
            "seq": e.seq,
            "signal": e.payload.get("signal"),
            "payload": e.payload.get("payload"),
            "at": e.created_at,
        }
        for e in reversed(events.order_by("-seq")[:MAX_SIGNALS_SHOWN])
    ]


def _in_doubt(run_id: UUID, tenant_id: UUID) -> list[dict[str, Any]]:
    ops = ToolOperation.objects.filter(run_id=run_id, tenant_id=tenant_id, status__in=["started", "unknown"])
    return [
        {"operation_id": o.operation_id, "tool_name": o.tool_name, "status": o.status, "attempts": o.attempts}
        for o in ops.order_by("created_at")
    ]


def _keeper_looks_up(tool_name: str) -> bool:
    contract = registry.tool(tool_name)
    return contract is not None and contract.lookup is not None


def _workflow(grant: LeaseGrant) -> tuple[Workflow | None, str]:
    try:
        return registry.get(grant.workflow_name, grant.workflow_version), ""
    except UnknownWorkflow as exc:
        return None, exc.message


def _release(grant: LeaseGrant) -> None:
    apply(m.LeaseReleased(grant.run_id, grant.tenant_id, grant.owner, grant.epoch))


def _token(grant: LeaseGrant, *, verifying: bool = False) -> str:
    return lease_token_sign(
        run_id=grant.run_id,
        tenant_id=grant.tenant_id,
        epoch=grant.epoch,
        owner=grant.owner,
        verifying=verifying,
        previous_owner=grant.previous_owner,
    )


def _grant_checked(grant: LeaseGrant, lookups: WorkerLookups | None = None) -> Claim | None:
    """What the kernel decides of a fresh grant, applied. None if the run was suspended instead (the
    refusal or the limit is its event) or moved on meanwhile (the lease is given back)."""
    if grant.takes_over and lookups is None:
        theirs = [op for op in resume_in_doubt(run_id=grant.run_id) if not _keeper_looks_up(op.tool_name)]
        if theirs:  # the worker's own lookups answer first: nothing is decided or written yet
            return Claim(grant, _token(grant, verifying=True), grant.revision, dict(grant.state), None,
                         _in_doubt(grant.run_id, grant.tenant_id), [], lookups_needed=True)  # fmt: skip
    workflow, unavailable = _workflow(grant)
    verification = resume_verify(grant=grant, worker_lookups=lookups) if grant.takes_over else None
    decision = decide_claim(
        grant,
        verification=verification,
        rules=workflow,
        unavailable_detail=unavailable,
        max_attempts=settings.KEEPER_MAX_ATTEMPTS,
        now=timezone.now(),
    )
    if isinstance(decision, Wait):  # an operation's first call may still be in flight: look again later
        apply(m.LeaseDeferred(grant.run_id, grant.tenant_id, grant.owner, grant.epoch, decision.retry_in))
        return None
    for move in decision.moves:
        if apply(move) is None:  # a person or a message moved it meanwhile: leave it to the next claim
            _release(grant)
            return None
    if not isinstance(decision, Proceed):
        return None
    trigger = "resume_request" if grant.status == RunStatus.SUSPENDED else "lease_takeover"
    return Claim(grant, _token(grant), decision.revision, decision.state, trigger if grant.takes_over else None,
                 _in_doubt(grant.run_id, grant.tenant_id), _signals(grant.run_id, grant.tenant_id))  # fmt: skip


def _claim_once(*, tenant_id: UUID, workflows: list[str], owner: str, ttl: float) -> Claim | None:
    with tenant_bind(tenant_id):
        for run_id in _claimable(tenant_id=tenant_id, names=workflows):
            grant = apply(m.LeaseTaken(run_id, tenant_id, owner, ttl, external=True))
            if grant is None:  # another worker won it
                continue
            claim = _grant_checked(grant)
            if claim is not None:
                return claim
    return None


# The claimable runs of a tenant's external workflows, oldest activity first; the lease statement decides.
_CLAIMABLE = """
SELECT r.run_id FROM agent_runs r
  JOIN external_workflows w
    ON w.tenant_id = r.tenant_id AND w.name = r.workflow_name AND w.version = r.workflow_version
 WHERE r.tenant_id = %(tenant_id)s AND r.workflow_name = ANY(%(names)s)
   AND (r.status = 'running' OR (r.status = 'suspended' AND r.resume_requested_at IS NOT NULL))
   AND NOT r.imported
   AND (r.lease_owner IS NULL OR r.lease_expires_at < statement_timestamp())
   AND (r.wake_at IS NULL OR r.wake_at <= statement_timestamp())
 ORDER BY r.updated_at
 LIMIT %(limit)s
"""


def _claimable(*, tenant_id: UUID, names: list[str]) -> list[UUID]:
    """Runs of these external workflows an outside worker could lease now (a race may still lose them)."""
    params = {"tenant_id": tenant_id, "names": list(names), "limit": _CANDIDATES}
    return [row[0] for row in wire.rows(_CLAIMABLE, params)]


def worker_owner(*, key_prefix: str, worker_id: str) -> str:
    """The lease owner (and event actor) of one claim: the key, the worker's name and a nonce."""
    return f"external:kp_{key_prefix}:{worker_id}:{secrets.token_hex(4)}"


_waiting = 0  # claims of this process waiting now (claim_wait_slot)
_waiting_lock = threading.Lock()


@contextmanager
def claim_wait_slot(wait_seconds: float) -> Iterator[bool]:
    """Whether this claim may wait for a run: each waiting claim holds a web thread, so at most
    KEEPER_CLAIM_WAITERS of one process wait at once (idle outside workers would otherwise hold every
    thread and another tenant's request would wait). A claim past them looks once; with nothing ready
    the API answers 204 with Retry-After, which the Python client waits out."""
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
    known = set(
        ExternalWorkflow.objects.filter(tenant_id=tenant_id, name__in=workflows).values_list(
            "name", flat=True
        )
    )
    unknown = sorted(set(workflows) - known)
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


def run_of(lease: Lease) -> AgentRun:
    run = AgentRun.objects.filter(run_id=lease.run_id, tenant_id=lease.tenant_id).first()
    if run is None:
        raise NotFound(f"no run {lease.run_id}", code="run_not_found")
    return run


def lost(run: AgentRun, lease: Lease) -> LeaseLost:
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


def held(lease: Lease) -> AgentRun:
    """The run, if this token still holds it (else LeaseLost)."""
    run = run_of(lease)
    if (
        run.lease_epoch != lease.epoch
        or run.lease_owner != lease.owner
        or run.status not in (RunStatus.RUNNING, RunStatus.SUSPENDED)
    ):
        raise lost(run, lease)
    return run


def lookups_answered(lease: Lease) -> None:
    if lease.verifying:
        raise LookupsRequired(
            f"run {lease.run_id} was taken over with operations in doubt: report what your lookup finds for "
            "each (POST .../lookups) before anything else; the answer carries the token to use next"
        )


def external_heartbeat(*, lease: Lease, ttl: float | None = None) -> Any:
    with tenant_bind(lease.tenant_id):
        ttl = float(ttl if ttl is not None else settings.KEEPER_LEASE_TTL)
        expires = apply(m.LeaseRenewed(lease.run_id, lease.tenant_id, lease.owner, lease.epoch, ttl))
        if expires is None:
            raise lost(run_of(lease), lease)
        return expires


def external_release(*, lease: Lease, retry_in: float = 0.0, attempted: bool = False) -> None:
    """Give the run back. A release is not a failed attempt (the try its claim counted is given back)
    unless the worker says it tried the step and it failed (`attempted`)."""
    with tenant_bind(lease.tenant_id):
        if not apply(
            m.LeaseReleased(lease.run_id, lease.tenant_id, lease.owner, lease.epoch, retry_in, attempted)
        ):
            raise lost(run_of(lease), lease)


def external_lookups(*, lease: Lease, lookups: WorkerLookups) -> Claim:
    """The worker's lookups of the operations in doubt of a run it took over: verification decides
    with them (as with Keeper's own tools' lookups) and the claim goes on, or the run is refused."""
    if not lease.verifying:
        raise InvalidInput("this claim asked for no lookups", code="no_lookups_asked")
    with tenant_bind(lease.tenant_id):
        run = held(lease)
        grant = LeaseGrant(
            run_id=run.run_id,
            tenant_id=lease.tenant_id,
            owner=lease.owner,
            epoch=lease.epoch,
            expires_at=run.lease_expires_at or timezone.now(),
            revision=run.state_revision,
            next_step=run.next_step or "",
            state=run.state,
            status=run.status,
            resume_requested_by=run.resume_requested_by,
            workflow_name=run.workflow_name,
            workflow_version=run.workflow_version,
            state_schema_version=run.state_schema_version,
            attempt=run.attempt,
            previous_owner=lease.previous_owner,
            previous_epoch=lease.epoch - 1,
            child_of_run_id=run.child_of_id,
        )
        claim = _grant_checked(grant, lookups)
        if claim is not None:
            return claim
        run = run_of(lease)
        if run.status == RunStatus.SUSPENDED and run.lease_owner is None:
            raise ResumeRefused(
                f"run {run.run_id} was not resumed: {run.suspend_reason}: {run.suspend_detail}",
                details={
                    "status": run.status,
                    "suspend_reason": run.suspend_reason,
                    "detail": run.suspend_detail,
                },
            )
        raise lost(run, lease)


@dataclass(frozen=True)
class Outcome:
    """What the step decided, as the worker sends it: exactly one of next_step, suspend, complete, fail."""

    kind: str  # next | suspend | complete | fail
    next_step: str | None = None
    reason: str = ""
    detail: str = ""
    result: Any = None

    def as_kernel(self, state: dict[str, Any]) -> Next | Suspend | Complete | Fail:
        if self.kind == "next":
            return Next(state, self.next_step or "")
        if self.kind == "suspend":
            return Suspend(state, self.reason, self.detail, self.next_step)
        if self.kind == "complete":
            return Complete(state, self.result)
        return Fail(state, self.reason, self.detail)


@dataclass(frozen=True)
class Committed:
    run_id: UUID
    seq: int
    revision: int
    status: str
    next_step: str | None
    event_type: str
    replayed: bool


_STATUS = {
    m.StepCommitted: RunStatus.RUNNING,
    m.Suspended: RunStatus.SUSPENDED,
    m.Completed: RunStatus.COMPLETED,
    m.Failed: RunStatus.FAILED,
}
_EVENT = {m.Suspended: "run_suspended", m.Completed: "run_completed", m.Failed: "run_failed"}


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
    """The step's result as the kernel decides it, in one statement fenced by revision and lease epoch.

    The same commit sent again (the answer was lost) gets the first answer back with `replayed`;
    anything else that does not match is a 409 with the run's current revision, and nothing is written.
    """
    lookups_answered(lease)
    with tenant_bind(lease.tenant_id):
        run = run_of(lease)
        if not isinstance(state, dict):
            raise InvalidState(f"state must be a JSON object, not {type(state).__name__}")
        digest = json_digest(
            {
                "revision": expected_revision,
                "state": state,
                "outcome": outcome.__dict__,
                "payload": payload,
                "spent": spent,
            }  # fmt: skip
        )
        replay = _replayed(run, lease, expected_revision, digest)
        if replay is not None:
            return replay
        _fenced(run, lease, expected_revision)  # a commit that would be refused is not decided on
        try:
            workflow = registry.get(run.workflow_name, run.workflow_version)
        except UnknownWorkflow as exc:
            raise InvalidInput(exc.message, code="workflow_version_unavailable") from None
        situation = Situation(
            held=m.Held(run.run_id, run.tenant_id, lease.owner, lease.epoch, expected_revision, run.attempt),
            step_id=run.next_step or "",
            state=state_encode(run.state),
            workflow_version=run.workflow_version,
            spent=spent,
            keep_lease=keep_lease,
            from_outside=True,
            approval_pending=Approval.objects.filter(
                run_id=run.run_id, tenant_id=lease.tenant_id, status=ApprovalStatus.PENDING
            ).exists(),
            in_doubt=_in_doubt(run.run_id, lease.tenant_id),
            extra_payload={**payload, "commit_digest": digest},
        )
        move = decide_outcome(workflow, outcome.as_kernel(state), situation)
        if isinstance(move, Invalid):
            raise InvalidInput(move.detail, code=move.code, details=move.details)
        written = apply(move)
        if written is None:
            run = run_of(lease)
            replay = _replayed(run, lease, expected_revision, digest)
            if replay is not None:
                return replay
            _fenced(run, lease, expected_revision)
            raise lost(run, lease)
        seq = written.seq if isinstance(written, Ending) else written
        if isinstance(written, Ending):  # as Keeper's own worker does for a run it completes
            run_completed_learn(run_id=run.run_id, tenant_id=lease.tenant_id, answered=written.answered)
        event_type = move.event_type if isinstance(move, m.StepCommitted) else _EVENT[type(move)]
        next_step = move.next_step if isinstance(move, m.StepCommitted) else (
            move.resume_at if isinstance(move, m.Suspended) else None)  # fmt: skip
        return Committed(run.run_id, seq, seq, _STATUS[type(move)], next_step, event_type, False)


def _fenced(run: AgentRun, lease: Lease, expected_revision: int) -> None:
    """StaleRevision or LeaseLost if a commit at `expected_revision` under this lease would be refused."""
    if run.state_revision != expected_revision:
        raise StaleRevision(
            f"run {run.run_id} is at revision {run.state_revision}, not {expected_revision}: nothing was written",
            details={"current_revision": run.state_revision, "status": run.status},
        )
    if run.lease_epoch != lease.epoch or run.lease_owner != lease.owner:
        raise lost(run, lease)


def _replayed(run: AgentRun, lease: Lease, expected_revision: int, digest: str) -> Committed | None:
    """The answer of this very commit, if it was already written (by this lease, at this revision)."""
    event = AgentEvent.objects.filter(
        run_id=run.run_id, tenant_id=lease.tenant_id, seq=expected_revision + 1, actor=lease.owner
    ).first()
    if event is None or (event.payload or {}).get("commit_digest") != digest:
        return None
    status = {
        "step_completed": RunStatus.RUNNING,
        "run_suspended": RunStatus.SUSPENDED,
        "run_completed": RunStatus.COMPLETED,
        "run_failed": RunStatus.FAILED,
    }[event.event_type]
    return Committed(run.run_id, event.seq, event.seq, status, event.next_step, event.event_type, True)
