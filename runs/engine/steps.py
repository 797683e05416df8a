"""Advancing a run: acquire the lease, run its steps back to back for one slice, commit each, wake the next.

This is the per-step hot path: one statement to take the lease, then per step the step itself and
one statement to commit it (fenced by revision and epoch, keeping the lease while the slice lasts).
A slice ends when the run suspends, completes or fails, or after KEEPER_SLICE_STEPS steps or
KEEPER_SLICE_MS milliseconds; then the lease is released and the run re-enqueued, so one long run
cannot starve the others. Everything that goes wrong is written down as an event (take-overs, step
errors, suspensions) and the run never continues on a guess.

Over 400 lines on purpose: the step executor is one path (lease, run, commit, wake) whose
failure branches must be read together.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol
from uuid import UUID

from django.conf import settings
from django.utils import timezone

from core.crash import crash_point
from core.digests import NotJSONSerializable, canonical_json
from core.errors import ApplicationError
from core.identity import worker_identity
from core.logging import log_context
from core.metrics import observe_step
from core.tenancy import run_tenant, tenant_bind
from core.tracing import span
from runs.engine import store, workspace
from runs.engine.budgets import BudgetExhausted, budgets_refusal, budgets_spend
from runs.engine.charges import step_charging
from runs.engine.dispatch import run_enqueue
from runs.engine.errors import ConcurrentResume, InvalidState, UnknownWorkflow
from runs.engine.leases import HeldLease, lease_held
from runs.engine.models import RunStatus
from runs.engine.registry import (
    Complete,
    Fail,
    Next,
    StepContext,
    StepFailed,
    Suspend,
    Workflow,
    registry,
)
from runs.engine.resume import resume_event_payload, resume_verify
from runs.engine.runs import run_parent_wake
from runs.engine.state import EncodedState, state_encode
from runs.engine.store import LeaseGrant

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdvanceResult:
    """What one call did: `not_acquired`, `committed` or `fenced` (another revision or epoch won).

    `status`, `seq` and `event_type` are those of the slice's last commit; `steps` counts the steps
    the slice ran. `carry` is internal: the lease kept for the next step of the same slice.
    """

    outcome: str
    status: str | None = None
    seq: int | None = None
    event_type: str | None = None
    steps: int = 0
    carry: LeaseGrant | None = dataclasses.field(default=None, repr=False, compare=False)


class _Slice:
    """How much of this worker's turn with a run is left: KEEPER_SLICE_STEPS steps, KEEPER_SLICE_MS ms."""

    def __init__(self, lease: HeldLease, *, sliced: bool):
        self.lease = lease
        self.steps = 0
        self.max_steps = settings.KEEPER_SLICE_STEPS if sliced else 1
        self.deadline = time.monotonic() + settings.KEEPER_SLICE_MS / 1000.0
        # The state the slice's last step committed, as it was encoded for the commit: the next
        # step starts from it without encoding it again (a fresh grant's state is encoded afresh).
        self.committed: EncodedState | None = None

    def continues(self) -> bool:
        """Asked before committing a step that moves on: keep the lease for one more step?"""
        return self.steps + 1 < self.max_steps and time.monotonic() < self.deadline and not self.lease.lost


class _Committer:
    """Commits under one lease, tracking the revision it expects next."""

    def __init__(self, grant: LeaseGrant):
        self.grant = grant
        self.expected = grant.revision

    def commit(
        self,
        *,
        state: EncodedState,
        next_step: str | None,
        status: str,
        event_type: str,
        payload: dict[str, Any],
        step_id: str | None = None,
        suspend_reason: str | None = None,
        suspend_detail: str = "",
        result: Any = None,
        release: bool = True,
        reset_attempt: bool = True,
        retry_in: float = 0.0,
        state_schema_version: int | None = None,
        state_digest: str | None = None,
        event_state: bool = True,
        resume_at_wake: bool = False,
    ) -> int:
        seq = store.commit_step(
            run_id=self.grant.run_id,
            expected_revision=self.expected,
            epoch=self.grant.epoch,
            owner=self.grant.owner,
            state_json=state.json,
            state_digest=state_digest or state.digest,
            event_state=event_state,
            next_step=next_step,
            status=status,
            event_type=event_type,
            step_id=step_id,
            attempt=self.grant.attempt,
            payload_json=canonical_json(payload),
            suspend_reason=suspend_reason,
            suspend_detail=suspend_detail,
            result_json=None if result is None else canonical_json(result),
            release=release,
            reset_attempt=reset_attempt,
            retry_in=retry_in,
            state_schema_version=state_schema_version,
            resume_at_wake=resume_at_wake,
        )
        if seq is None:
            raise ConcurrentResume(
                f"run {self.grant.run_id} is no longer at revision {self.expected} under lease epoch "
                f"{self.grant.epoch}; nothing was written",
                details={"run_id": str(self.grant.run_id), "expected_revision": self.expected},
            )
        self.expected = seq
        return seq


def _span_attributes(grant: LeaseGrant) -> dict[str, Any]:
    return {
        "keeper.run_id": grant.run_id,
        "keeper.tenant_id": grant.tenant_id,
        "keeper.step": grant.next_step,
        "keeper.revision": grant.revision,
        "keeper.workflow": grant.workflow_name,
        "keeper.workflow_version": grant.workflow_version,
    }


def run_advance(*, run_id: UUID, worker_id: str | None = None, sliced: bool = False) -> AdvanceResult:
    """Run the run's next step if this worker can take its lease. Safe to call any number of times.

    `sliced` (what a worker's task asks for) keeps the lease after each step that moves on and runs
    the next one directly, for one slice; each step is still committed, fenced, before the next starts.
    """
    owner = worker_id or worker_identity()
    tenant_id = run_tenant(run_id)  # row-level security: the task works as the run's tenant
    if tenant_id is None:
        return AdvanceResult("not_acquired")
    with tenant_bind(tenant_id):
        grant = store.lease_acquire(run_id=run_id, owner=owner, ttl=settings.KEEPER_LEASE_TTL)
        if grant is None:
            return AdvanceResult("not_acquired")
        with lease_held(grant) as lease, log_context(run_id=run_id, tenant_id=grant.tenant_id):
            try:
                result = _advance_slice(grant, lease, sliced=sliced)
            except ConcurrentResume as exc:
                logger.info("%s", exc.message)
                fenced = True
            else:
                fenced = False
        if fenced:
            # Lost to a newer revision (a message, a person) rather than a newer epoch: the lease
            # is still ours, so give it back now and wake the run, instead of holding it a whole TTL.
            if store.lease_release(run_id=run_id, owner=owner, epoch=grant.epoch):
                run_enqueue(run_id=run_id)
            return AdvanceResult("fenced")
    if result.status == RunStatus.RUNNING:
        run_enqueue(run_id=run_id)
    if grant.child_of_run_id is not None:
        _wake_parent_if_finished(result, run_id=run_id, tenant_id=tenant_id)
    return result


def _advance_slice(grant: LeaseGrant, lease: HeldLease, *, sliced: bool) -> AdvanceResult:
    """Steps back to back under one lease until the run stops moving or the slice is used up."""
    turn = _Slice(lease, sliced=sliced)
    workspace.workspace_slice_begin(run_id=grant.run_id)
    try:
        while True:
            try:
                with span("keeper.step", _span_attributes(grant)):  # one span per step, not per slice
                    result = _advance_leased(grant, lease, turn)
            finally:
                turn.steps += 1
            if result.carry is None:
                return dataclasses.replace(result, steps=turn.steps)
            grant = result.carry
    finally:
        workspace.workspace_slice_end(run_id=grant.run_id)


def _wake_parent_if_finished(result: AdvanceResult, *, run_id: UUID, tenant_id: UUID) -> None:
    """A child run just finished: send its parent's wake-up (the request was committed with it)."""
    if result.status in (RunStatus.COMPLETED, RunStatus.FAILED):
        with tenant_bind(tenant_id):
            run_parent_wake(run_id=run_id)


def _retry_delay(attempt: int) -> float:
    return min(float(settings.KEEPER_RETRY_BACKOFF) * (2.0 ** max(0, attempt - 1)), 300.0)


class _Suspend(Protocol):
    """Suspends the run being advanced, with a reason and a detail (`_advance_leased`'s `suspend`)."""

    def __call__(self, reason: str, detail: str, **extra: Any) -> AdvanceResult: ...


def _advance_leased(grant: LeaseGrant, lease: HeldLease, turn: _Slice) -> AdvanceResult:
    committer = _Committer(grant)
    state = dict(grant.state)
    current, turn.committed = turn.committed or state_encode(state), None
    base = {"workflow_version": grant.workflow_version, "step": grant.next_step}

    def suspend(reason: str, detail: str, **extra: Any) -> AdvanceResult:
        seq = committer.commit(
            state=current,
            next_step=grant.next_step,
            status=RunStatus.SUSPENDED,
            event_type="run_suspended",
            step_id=None,
            payload={**base, "reason": reason, "detail": detail, **extra},
            suspend_reason=reason,
            suspend_detail=detail,
            reset_attempt=False,
        )
        return AdvanceResult("committed", RunStatus.SUSPENDED, seq, "run_suspended")

    if grant.status == RunStatus.SUSPENDED or grant.previous_owner is not None:
        # A person asked this run to continue, or its previous holder's lease expired mid-step
        # (crash, pause, partition): verify before anything runs, and write down every check.
        verification = resume_verify(grant=grant)
        payload = resume_event_payload(grant=grant, verification=verification)
        refusal = verification.refusal
        if refusal is not None:
            # The refusal carries the last committed digest forward, never the stored state's: a
            # state changed outside the engine stays refused until a person accepts it.
            trusted = verification.committed_digest or current.digest
            seq = committer.commit(
                state=current,
                next_step=grant.next_step,
                status=RunStatus.SUSPENDED,
                event_type="resume_refused",
                step_id=None,
                payload=payload,
                suspend_reason=refusal.code,
                suspend_detail=refusal.detail,
                reset_attempt=False,
                state_digest=trusted,
                event_state=trusted == current.digest,
            )
            return AdvanceResult("committed", RunStatus.SUSPENDED, seq, "resume_refused")
        state = verification.state
        current = state_encode(state)
        committer.commit(
            state=current,
            next_step=grant.next_step,
            status=RunStatus.RUNNING,
            event_type="resume_verified",
            step_id=None,
            payload=payload,
            release=False,
            reset_attempt=False,
        )

    if grant.attempt > settings.KEEPER_MAX_ATTEMPTS:
        return suspend(
            "too_many_attempts",
            f"step {grant.next_step!r} was attempted {grant.attempt - 1} times without committing "
            f"(KEEPER_MAX_ATTEMPTS={settings.KEEPER_MAX_ATTEMPTS})",
        )
    try:
        workflow = registry.get(grant.workflow_name, grant.workflow_version)
    except UnknownWorkflow as exc:
        return suspend("workflow_version_unavailable", exc.message)
    step = workflow.step(grant.next_step)
    if step is None:
        return suspend(
            "unknown_step", f"workflow {workflow.name} {workflow.version} has no step {grant.next_step!r}"
        )
    if workflow.schemas is not None and grant.state_schema_version != workflow.state_schema_version:
        try:
            migrated = workflow.schemas.migrate(state, grant.state_schema_version)
        except ApplicationError as exc:  # no path, or a checkpoint its schema does not accept
            return suspend(exc.code, exc.message)
        for hop in migrated.steps:
            current = state_encode(hop.state)
            committer.commit(
                state=current,
                next_step=grant.next_step,
                status=RunStatus.RUNNING,
                event_type="state_migrated",
                step_id=None,
                release=False,
                reset_attempt=False,
                state_schema_version=hop.to_version,
                payload={
                    **base,
                    "from_version": hop.from_version,
                    "to_version": hop.to_version,
                    "digest_before": hop.digest_before,
                    "digest_after": hop.digest_after,
                },
            )
        state = migrated.state
    if over := budgets_refusal(state.get("budgets")):
        return suspend(*over)

    ctx = StepContext(
        run_id=grant.run_id,
        tenant_id=grant.tenant_id,
        workflow=workflow,
        step=step.name,
        attempt=grant.attempt,
        revision=committer.expected,
        lease=lease,
    )
    started = time.monotonic()
    workspace.workspace_step_begin(run_id=grant.run_id)
    try:
        with step_charging(
            ctx, state.get("budgets")
        ):  # model calls charge this step (runs/engine/charges.py)
            outcome = step.fn(ctx, dict(state))
    except BudgetExhausted as exc:  # a model call refused: suspend with what the step spent until then
        spent = ctx.spent(wall_s=time.monotonic() - started)
        current = _spend(state, spent)
        return suspend(exc.code, exc.message, spent=spent)
    except StepFailed as exc:  # on purpose: fail with the state as it was before the step
        outcome = Fail(json.loads(current.json), exc.code, exc.detail)
    except Exception as exc:
        spent = ctx.spent(wall_s=time.monotonic() - started)
        return _step_error(
            committer, grant, _spend(state, spent), base, spent, exc, lease_lost=ctx.lease_lost
        )
    finally:
        observe_step(workflow=workflow.name, step=step.name, seconds=time.monotonic() - started)
    spent = ctx.spent(wall_s=time.monotonic() - started)
    result = _commit_outcome(
        committer, grant, workflow, current, {**base, "spent": spent}, outcome, suspend, spent, turn
    )
    workspace.workspace_step_end(run_id=grant.run_id, result=result)
    return result


def _spend(state: dict[str, Any], spent: dict[str, float]) -> EncodedState:
    """The state with what the step spent added to its budgets (the step cannot change budgets)."""
    budgets = state.get("budgets")
    return state_encode(
        {**state, "budgets": budgets_spend(budgets, spent)} if isinstance(budgets, dict) else state
    )


def _step_error(
    committer: _Committer,
    grant: LeaseGrant,
    current: EncodedState,
    base: dict[str, Any],
    spent: dict[str, float],
    exc: Exception,
    *,
    lease_lost: bool = False,
) -> AdvanceResult:
    error = {"error_type": type(exc).__name__, "message": str(exc)[:2000]}
    base = {**base, "spent": spent}
    if lease_lost:  # another worker may hold the run now (its reconcile may be what this step tripped
        # on); the commit below is refused if so: not a step's failure to warn about
        logger.info(
            "run %s step %s raised %s after its lease was lost",
            grant.run_id,
            grant.next_step,
            error["error_type"],
        )
    else:
        logger.warning(
            "run %s step %s attempt %s raised %s", grant.run_id, grant.next_step, grant.attempt, error
        )
    if grant.attempt >= settings.KEEPER_MAX_ATTEMPTS:
        detail = f"step {grant.next_step!r} raised {error['error_type']} on all {grant.attempt} attempts"
        seq = committer.commit(
            state=current,
            next_step=grant.next_step,
            status=RunStatus.SUSPENDED,
            event_type="step_error",
            step_id=grant.next_step,
            payload={**base, **error, "reason": "step_error", "detail": detail},
            suspend_reason="step_error",
            suspend_detail=f"{detail}: {error['message']}",
            reset_attempt=False,
        )
        return AdvanceResult("committed", RunStatus.SUSPENDED, seq, "step_error")
    delay = _retry_delay(grant.attempt)
    seq = committer.commit(
        state=current,
        next_step=grant.next_step,
        status=RunStatus.RUNNING,
        event_type="step_error",
        step_id=grant.next_step,
        payload={**base, **error, "retry_in_s": delay},
        reset_attempt=False,
        retry_in=delay,
    )
    run_enqueue(run_id=grant.run_id, countdown=delay)
    return AdvanceResult("committed", "retrying", seq, "step_error")


@dataclass(frozen=True)
class _Timer:
    wake_in: float | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    commit: dict[str, Any] = field(default_factory=dict)


def _timer(outcome: Suspend) -> _Timer:
    """A suspension with a wake time: what its commit sets (the resume request, the wake time)."""
    if outcome.wake_at is None:
        return _Timer()
    wake_in = max((outcome.wake_at - timezone.now()).total_seconds(), 0.001)
    return _Timer(
        wake_in=wake_in,
        payload={"wake_at": outcome.wake_at.isoformat()},
        commit={"retry_in": wake_in, "resume_at_wake": True},
    )


def _commit_outcome(
    committer: _Committer,
    grant: LeaseGrant,
    workflow: Workflow,
    current: EncodedState,
    base: dict[str, Any],
    outcome: object,
    suspend: _Suspend,
    spent: dict[str, float],
    turn: _Slice,
) -> AdvanceResult:
    if not isinstance(outcome, Next | Suspend | Complete | Fail):
        return suspend(
            "invalid_step_result",
            f"step {grant.next_step!r} returned {type(outcome).__name__}, not Next/Suspend/Complete/Fail",
        )
    try:
        if not isinstance(outcome.state, dict):
            raise InvalidState(f"state must be a JSON object, not {type(outcome.state).__name__}")
        budgets = json.loads(current.json).get("budgets")
        new_state = _spend(
            {**outcome.state, "budgets": budgets} if budgets is not None else outcome.state, spent
        )
        if isinstance(outcome, Complete):
            canonical_json(outcome.result)
    except InvalidState as exc:
        return suspend(
            exc.code, f"step {grant.next_step!r} produced a state that cannot be stored: {exc.message}"
        )
    except NotJSONSerializable as exc:
        return suspend(
            "invalid_step_result", f"step {grant.next_step!r} returned a result that is not JSON: {exc}"
        )

    step_id = grant.next_step
    if isinstance(outcome, Next):
        if workflow.step(outcome.step) is None:
            return suspend(
                "unknown_step", f"step {step_id!r} moved to {outcome.step!r}, which does not exist"
            )
        event_type, said = outcome.say if outcome.say is not None else ("step_completed", {})
        if event_type not in ("step_completed", "assistant_message", "tool_call"):
            return suspend("invalid_step_result", f"step {step_id!r} cannot commit a {event_type!r} event")
        keep = turn.continues()
        seq = committer.commit(
            state=new_state,
            next_step=outcome.step,
            status=RunStatus.RUNNING,
            event_type=event_type,
            step_id=step_id,
            payload={**said, **base, "next_step": outcome.step},
            release=not keep,
        )
        crash_point("after_checkpoint", key=str(grant.run_id), step=step_id)
        carry = None
        if keep:
            carry, turn.committed = _carry(grant, workflow, seq, outcome.step, new_state), new_state
        return AdvanceResult("committed", RunStatus.RUNNING, seq, event_type, carry=carry)
    if isinstance(outcome, Suspend):
        resume_at = outcome.step or step_id
        if workflow.step(resume_at) is None:
            return suspend(
                "unknown_step", f"step {step_id!r} asked to resume at {resume_at!r}, which does not exist"
            )
        timer = _timer(outcome)
        seq = committer.commit(
            state=new_state,
            next_step=resume_at,
            status=RunStatus.SUSPENDED,
            event_type="run_suspended",
            step_id=step_id,
            suspend_reason=outcome.reason,
            suspend_detail=outcome.detail,
            payload={
                **base,
                "reason": outcome.reason,
                "detail": outcome.detail,
                "resume_at": resume_at,
                **timer.payload,
            },
            **timer.commit,
        )
        status, event_type = RunStatus.SUSPENDED, "run_suspended"
        if timer.wake_in is not None:  # the sweep wakes it all the same if this message is lost
            run_enqueue(run_id=grant.run_id, countdown=timer.wake_in)
    elif isinstance(outcome, Complete):
        seq = committer.commit(
            state=new_state,
            next_step=None,
            status=RunStatus.COMPLETED,
            event_type="run_completed",
            step_id=step_id,
            payload=base,
            result=outcome.result,
        )
        status, event_type = RunStatus.COMPLETED, "run_completed"
    else:
        failure = {"code": outcome.code, "detail": outcome.detail}
        seq = committer.commit(
            state=new_state,
            next_step=None,
            status=RunStatus.FAILED,
            event_type="run_failed",
            step_id=step_id,
            payload={**base, **failure},
            result=failure,
        )
        status, event_type = RunStatus.FAILED, "run_failed"
    crash_point("after_checkpoint", key=str(grant.run_id), step=step_id)
    return AdvanceResult("committed", status, seq, event_type)


def _carry(
    grant: LeaseGrant, workflow: Workflow, seq: int, next_step: str, state: EncodedState
) -> LeaseGrant:
    """The lease as the next step of the slice sees it: what was just committed, as a fresh grant
    would read it back (the stored JSON, the step's first attempt, no take-over to verify)."""
    schema = workflow.state_schema_version if workflow.schemas is not None else grant.state_schema_version
    return dataclasses.replace(
        grant,
        revision=seq,
        next_step=next_step,
        state=json.loads(state.json),
        status=RunStatus.RUNNING,
        resume_requested_by="",
        state_schema_version=schema,
        attempt=1,
        previous_owner=None,
        previous_epoch=grant.epoch,
    )
