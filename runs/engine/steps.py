"""Keeper's own driver of the kernel: take a run's lease, run its steps back to back for one slice.

Per step: the kernel decides what the lease grant becomes (resume verification, the attempts limit,
the workflow and step, state migrations, budgets: runs.kernel.decide.decide_claim), the step function
runs here, and the kernel decides what its outcome becomes (decide_outcome); each decision is applied
as a move, fenced by revision and lease epoch. A slice ends when the run suspends, completes or fails,
or after KEEPER_SLICE_STEPS steps or KEEPER_SLICE_MS milliseconds; then the lease is released and the
run re-enqueued, so one long run cannot starve the others. The HTTP worker protocol
(runs.external.protocol) is the other driver of the same decisions.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.conf import settings
from django.utils import timezone

from core.crash import crash_point
from core.identity import worker_identity
from core.logging import log_context
from core.metrics import observe_step
from core.tenancy import run_tenant, tenant_bind
from core.tracing import span
from runs.engine import workspace
from runs.engine.charges import step_charging
from runs.engine.dispatch import run_enqueue
from runs.engine.leases import HeldLease, lease_held
from runs.engine.registry import StepContext, StepFailed, Workflow, registry
from runs.engine.replays import replay_applied, replay_suspended
from runs.engine.resume import resume_verify
from runs.engine.runs import run_parent_wake
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.budgets import BudgetExhausted, budgets_spend
from runs.kernel.decide import (
    Invalid,
    Proceed,
    Situation,
    Wait,
    decide_claim,
    decide_invalid,
    decide_outcome,
    decide_step_error,
)
from runs.kernel.errors import ConcurrentResume, UnknownWorkflow
from runs.kernel.models import RunStatus, ToolOperation
from runs.kernel.outcomes import Fail, Suspend
from runs.kernel.records import Ending, LeaseGrant
from runs.kernel.state import EncodedState, state_encode

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AdvanceResult:
    """What one call did: `not_acquired`, `committed`, `fenced` (another revision or epoch won) or
    `deferred` (nothing decided yet: the run is looked at again later, without an event).

    `status`, `seq` and `event_type` are those of the slice's last commit; `steps` counts the steps
    the slice ran; `tenant_id` is the run's tenant (None if no lease was taken); `answered`, for a run
    that completed, whether it had answered a turn (None if the commit could not say). `carry` is
    internal: the lease kept for the next step of the same slice.
    """

    outcome: str
    status: str | None = None
    seq: int | None = None
    event_type: str | None = None
    steps: int = 0
    carry: LeaseGrant | None = dataclasses.field(default=None, repr=False, compare=False)
    tenant_id: UUID | None = dataclasses.field(default=None, repr=False, compare=False)
    answered: bool | None = dataclasses.field(default=None, repr=False, compare=False)


class _Slice:
    """How much of this worker's turn with a run is left: KEEPER_SLICE_STEPS steps, KEEPER_SLICE_MS ms."""

    def __init__(self, lease: HeldLease, *, sliced: bool):
        self.lease = lease
        self.steps = 0
        self.max_steps = settings.KEEPER_SLICE_STEPS if sliced else 1
        self.deadline = time.monotonic() + settings.KEEPER_SLICE_MS / 1000.0
        # The state the slice's last step committed, as it was encoded for the commit: the next step
        # starts from it without encoding it again (a fresh grant's state is encoded afresh).
        self.committed: EncodedState | None = None

    def continues(self) -> bool:
        """Asked before committing a step that moves on: keep the lease for one more step?"""
        return self.steps + 1 < self.max_steps and time.monotonic() < self.deadline and not self.lease.lost


def _commit(move: m.WorkerMove) -> int | Ending:
    """Apply a lease holder's move; ConcurrentResume if its fence no longer holds (nothing written)."""
    written = apply(move)
    if written is None:
        raise ConcurrentResume(
            f"run {move.held.run_id} is no longer at revision {move.held.revision} under lease epoch "
            f"{move.held.epoch}; nothing was written",
            details={"run_id": str(move.held.run_id), "expected_revision": move.held.revision},
        )
    return written


def _result(move: m.WorkerMove, written: int | Ending) -> AdvanceResult:
    """What a slice reports of the move it ended (or went on) with."""
    if isinstance(written, Ending):
        return AdvanceResult(
            "committed", RunStatus.COMPLETED, written.seq, "run_completed", answered=written.answered
        )
    seq = written
    if isinstance(move, m.StepCommitted):
        return AdvanceResult("committed", RunStatus.RUNNING, seq, move.event_type)
    if isinstance(move, m.StepErrored):
        return AdvanceResult("committed", "retrying" if move.retry_in is not None else RunStatus.SUSPENDED, seq,
                             "step_error")  # fmt: skip
    if isinstance(move, m.Failed):
        return AdvanceResult("committed", RunStatus.FAILED, seq, "run_failed")
    if isinstance(move, m.ResumeRefused):
        return AdvanceResult("committed", RunStatus.SUSPENDED, seq, "resume_refused")
    return AdvanceResult("committed", RunStatus.SUSPENDED, seq, "run_suspended")


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
        grant = apply(m.LeaseTaken(run_id, tenant_id, owner, settings.KEEPER_LEASE_TTL))
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
            # Lost to a newer revision (a message, a person) rather than a newer epoch: the lease is
            # still ours, so give it back now and wake the run, instead of holding it a whole TTL. The
            # step did run: its try counts.
            if apply(m.LeaseReleased(run_id, grant.tenant_id, owner, grant.epoch, attempted=True)):
                run_enqueue(run_id=run_id)
            return AdvanceResult("fenced")
        if grant.replay and result.status == RunStatus.SUSPENDED:  # the evaluation feeds it what comes next
            replay_suspended(grant.run_id)
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
                return dataclasses.replace(result, steps=turn.steps, tenant_id=grant.tenant_id)
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


def _workflow(grant: LeaseGrant) -> tuple[Workflow | None, str]:
    """The run's workflow version in this deployment, or why it is missing."""
    try:
        return registry.get(grant.workflow_name, grant.workflow_version), ""
    except UnknownWorkflow as exc:
        return None, exc.message


def _advance_leased(grant: LeaseGrant, lease: HeldLease, turn: _Slice) -> AdvanceResult:
    workflow, unavailable = _workflow(grant)
    verification = resume_verify(grant=grant) if grant.takes_over else None
    decision = decide_claim(
        grant,
        verification=verification,
        rules=workflow,
        unavailable_detail=unavailable,
        max_attempts=settings.KEEPER_MAX_ATTEMPTS,
        now=timezone.now(),
        encoded=turn.committed,
    )
    turn.committed = None
    if isinstance(decision, Wait):  # an operation's first call may still be in flight: look again later
        apply(m.LeaseDeferred(grant.run_id, grant.tenant_id, grant.owner, grant.epoch, decision.retry_in))
        run_enqueue(run_id=grant.run_id, countdown=decision.retry_in)
        return AdvanceResult("deferred")
    written: int | Ending = 0
    for move in decision.moves:
        written = _commit(move)
    if not isinstance(decision, Proceed):
        return _result(decision.moves[-1], written)
    assert workflow is not None
    step = workflow.step(grant.next_step)
    assert step is not None
    held = m.Held.of(grant, decision.revision)
    ctx = StepContext(
        run_id=grant.run_id,
        tenant_id=grant.tenant_id,
        workflow=workflow,
        step=step.name,
        attempt=grant.attempt,
        revision=held.revision,
        lease=lease,
    )
    state = decision.state
    started = time.monotonic()
    workspace.workspace_step_begin(run_id=grant.run_id)
    try:
        with step_charging(ctx, state.get("budgets")), _replaying(grant):  # charges.py; replays.py
            outcome = step.fn(ctx, dict(state))
    except BudgetExhausted as exc:  # a model call refused: suspend with what the step spent until then
        spent = ctx.spent(wall_s=time.monotonic() - started)
        situation = Situation(held, step.name, decision.encoded, grant.workflow_version, spent)
        return _suspend_spent(situation, spent, exc.code, exc.message)
    except StepFailed as exc:  # on purpose: fail with the state as it was before the step
        outcome = Fail(json.loads(decision.encoded.json), exc.code, exc.detail)
    except Exception as exc:
        spent = ctx.spent(wall_s=time.monotonic() - started)
        situation = Situation(held, step.name, decision.encoded, grant.workflow_version, spent)
        return _step_error(situation, grant, exc, lease_lost=ctx.lease_lost)
    finally:
        observe_step(workflow=workflow.name, step=step.name, seconds=time.monotonic() - started)
    wake_in = None
    if isinstance(outcome, Suspend) and outcome.wake_at is not None:
        wake_in = max((outcome.wake_at - timezone.now()).total_seconds(), 0.001)
    situation = Situation(held, step.name, decision.encoded, grant.workflow_version,
                          ctx.spent(wall_s=time.monotonic() - started), keep_lease=turn.continues(),
                          wake_in=wake_in)  # fmt: skip
    decided = decide_outcome(workflow, outcome, situation)
    move = decide_invalid(situation, decided) if isinstance(decided, Invalid) else decided
    written = _commit(move)
    crash_point("after_checkpoint", key=str(grant.run_id), step=step.name)
    if wake_in is not None and isinstance(move, m.Suspended):  # the sweep wakes it all the same if lost
        run_enqueue(run_id=grant.run_id, countdown=wake_in)
    if isinstance(move, m.StepCommitted) and move.keep_lease and isinstance(written, int):
        turn.committed = move.state
        carry = _carry(grant, workflow, written, move.next_step, move.state)
        result = AdvanceResult("committed", RunStatus.RUNNING, written, move.event_type, carry=carry)
    else:
        result = _result(move, written)
    workspace.workspace_step_end(run_id=grant.run_id, result=result)
    return result


def _replaying(grant: LeaseGrant) -> AbstractContextManager[object]:
    """A replay's step runs with its overrides, its side effects answered from the original's record."""
    return replay_applied(run_id=grant.run_id, tenant_id=grant.tenant_id) if grant.replay else nullcontext()


def _in_doubt(grant: LeaseGrant) -> list[str]:
    return list(
        ToolOperation.objects.filter(
            run_id=grant.run_id, tenant_id=grant.tenant_id, status__in=("started", "unknown")
        ).values_list("operation_id", flat=True)
    )


def _suspend_spent(situation: Situation, spent: dict[str, float], reason: str, detail: str) -> AdvanceResult:
    """A model call refused for a spent budget: the run suspends with what the step spent until then."""
    state = json.loads(situation.state.json)
    if isinstance(state.get("budgets"), dict):
        state["budgets"] = budgets_spend(state["budgets"], spent)
    payload = {"workflow_version": situation.workflow_version, "step": situation.step_id, "reason": reason,
               "detail": detail, "spent": spent}  # fmt: skip
    move = m.Suspended(situation.held, state_encode(state), situation.step_id, reason, detail, payload)
    return _result(move, _commit(move))


def _step_error(
    situation: Situation, grant: LeaseGrant, exc: Exception, *, lease_lost: bool
) -> AdvanceResult:
    error = {"error_type": type(exc).__name__, "message": str(exc)[:2000]}
    if lease_lost:  # another worker may hold the run now (its reconcile may be what this step tripped
        # on); the commit below is refused if so: not a step's failure to warn about
        logger.info("run %s step %s raised %s after its lease was lost", grant.run_id, grant.next_step,
                    error["error_type"])  # fmt: skip
    else:
        logger.warning(
            "run %s step %s attempt %s raised %s", grant.run_id, grant.next_step, grant.attempt, error
        )
    state = json.loads(situation.state.json)
    if isinstance(state.get("budgets"), dict):
        state["budgets"] = budgets_spend(state["budgets"], situation.spent)
    delay = _retry_delay(grant.attempt)
    move = decide_step_error(situation, state=state_encode(state), error=error, attempt=grant.attempt,
                             max_attempts=settings.KEEPER_MAX_ATTEMPTS, retry_in=delay)  # fmt: skip
    seq = _commit(move)
    if move.retry_in is not None:
        run_enqueue(run_id=grant.run_id, countdown=delay)
    return _result(move, seq)


def _carry(
    grant: LeaseGrant, workflow: Workflow, seq: int, next_step: str, state: EncodedState
) -> LeaseGrant:
    """The lease as the next step of the slice sees it: what was just committed, as a fresh grant would
    read it back (the stored JSON, the step's first attempt, no take-over to verify)."""
    schema = workflow.state_schema_version if workflow.schemas is not None else grant.state_schema_version
    g = grant  # built field by field, not with dataclasses.replace: once per step, it costs half as much
    return LeaseGrant(
        run_id=g.run_id,
        tenant_id=g.tenant_id,
        owner=g.owner,
        epoch=g.epoch,
        expires_at=g.expires_at,
        revision=seq,
        next_step=next_step,
        state=json.loads(state.json),
        status=RunStatus.RUNNING,
        resume_requested_by="",
        workflow_name=g.workflow_name,
        workflow_version=g.workflow_version,
        state_schema_version=schema,
        attempt=1,
        previous_owner=None,
        previous_epoch=g.epoch,
        child_of_run_id=g.child_of_run_id,
        replay=g.replay,
    )
