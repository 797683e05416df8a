"""The step decisions both drivers take: what a lease grant, a verification and an outcome become.

Keeper's Celery workers (runs.engine.steps) and the HTTP worker protocol (runs.external.protocol) are
thin drivers: they read, run the step (or wait for an outside worker to send its outcome), and apply
the moves these pure functions return. So the attempts limit, budgets and deadlines, state
migrations, resume verification's verdict, outcome validation and operations in doubt are decided
once, and the two drivers cannot disagree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core.digests import NotJSONSerializable, canonical_json
from core.errors import ApplicationError
from runs.kernel import moves as m
from runs.kernel.budgets import budgets_refusal, budgets_spend
from runs.kernel.errors import InvalidState
from runs.kernel.outcomes import Complete, Fail, Next, Suspend
from runs.kernel.records import LeaseGrant
from runs.kernel.state import EncodedState, state_encode
from runs.kernel.verify import IN_FLIGHT, Rules, Verification, event_payload

# Suspend reasons only Keeper writes: a worker saying them would fake an erasure, a fork, a refusal,
# a spent budget, an operation in doubt or a LangGraph thread.
RESERVED_REASONS = frozenset(
    {
        "subject_erased",
        "fork_not_started",
        "merge_conflicts",
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
APPROVAL_REASON = "approval_required"
RECONCILIATION_REASON = "reconciliation_required"
STEP_SAYS = ("step_completed", "assistant_message", "tool_call")


# --- at a claim ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Proceed:
    """Run the step: `moves` first (resume verified, state migrated), then the step from `state` at
    `revision` (what those moves committed)."""

    moves: tuple[m.WorkerMove, ...]
    state: dict[str, Any]
    encoded: EncodedState
    revision: int
    schema_version: int


@dataclass(frozen=True)
class Wait:
    """Nothing is decided yet (an operation's call may still be in flight): leave the lease expired
    (a LeaseDeferred move: its try given back) and look again in `retry_in` seconds, through a new
    take-over and its verification. No event."""

    retry_in: float
    moves: tuple[m.WorkerMove, ...] = ()


@dataclass(frozen=True)
class Stop:
    """Do not run the step: `moves` end with the run suspended (refused, or a limit reached)."""

    moves: tuple[m.WorkerMove, ...]
    reason: str


def decide_claim(
    grant: LeaseGrant,
    *,
    verification: Verification | None,
    rules: Rules | None,
    unavailable_detail: str,
    max_attempts: int,
    now: datetime,
    encoded: EncodedState | None = None,
) -> Proceed | Stop | Wait:
    """What a fresh lease on a run becomes. `verification` is None unless the grant takes over (a
    suspended run asked to resume, or a lease that expired under its previous holder). `encoded` is
    the grant's state already encoded (the step before it in the same slice committed it)."""
    held = m.Held.of(grant)
    state = dict(grant.state)
    current = encoded or state_encode(state)
    done: list[m.WorkerMove] = []
    base = {"workflow_version": grant.workflow_version, "step": grant.next_step}

    def stop(reason: str, detail: str, **extra: Any) -> Stop:
        return Stop((*done, m.Suspended(held, current, grant.next_step, reason, detail, {**base, "reason": reason,
                                                                                      "detail": detail, **extra})),
                    reason)  # fmt: skip

    if verification is not None:
        payload = event_payload(grant=grant, verification=verification)
        refusal = verification.refusal
        if refusal is not None and refusal.code == IN_FLIGHT:
            return Wait(verification.retry_in or 1.0)
        if refusal is not None:
            # The refusal carries the last committed digest forward, never the stored state's: a state
            # changed outside the engine stays refused until a person accepts it.
            trusted = verification.committed_digest or current.digest
            refused = m.ResumeRefused(
                held, current, grant.next_step, refusal.code, refusal.detail, payload, trusted
            )
            return Stop((refused,), refusal.code)
        state = verification.state
        current = state_encode(state)
        done.append(m.ResumeVerified(held, current, grant.next_step, payload))
        held = held.after(held.revision + 1)

    if grant.attempt > max_attempts:
        return stop(
            "too_many_attempts",
            f"step {grant.next_step!r} was attempted {grant.attempt - 1} times without committing "
            f"(KEEPER_MAX_ATTEMPTS={max_attempts})",
        )
    if rules is None:
        return stop("workflow_version_unavailable", unavailable_detail)
    if rules.step(grant.next_step) is None:
        return stop("unknown_step", f"workflow {rules.name} {rules.version} has no step {grant.next_step!r}")
    schema_version = grant.state_schema_version
    if rules.schemas is not None and grant.state_schema_version != rules.state_schema_version:
        try:
            migrated = rules.schemas.migrate(state, grant.state_schema_version)
        except ApplicationError as exc:  # no path, or a checkpoint its schema does not accept
            return stop(exc.code, exc.message)
        for hop in migrated.steps:
            current = state_encode(hop.state)
            done.append(
                m.StateMigrated(
                    held,
                    current,
                    grant.next_step,
                    hop.to_version,
                    {
                        **base,
                        "from_version": hop.from_version,
                        "to_version": hop.to_version,
                        "digest_before": hop.digest_before,
                        "digest_after": hop.digest_after,
                    },
                )  # fmt: skip
            )
            held = held.after(held.revision + 1)
        state, schema_version = migrated.state, rules.state_schema_version
    if over := budgets_refusal(state.get("budgets"), now=now):
        return stop(*over)
    return Proceed(tuple(done), state, current, held.revision, schema_version)


# --- after a step --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Invalid:
    """The outcome cannot be committed as it is: Keeper's worker suspends the run with `code`
    (invalid_step_result, unknown_step...); the HTTP protocol answers the worker 422 with it."""

    code: str
    detail: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Situation:
    """What the outcome decision knows of the run besides the outcome."""

    held: m.Held
    step_id: str
    state: EncodedState  # the state the step started from, as committed
    workflow_version: str
    spent: dict[str, float]
    keep_lease: bool = False
    from_outside: bool = False  # an outside worker's outcome: Keeper's reserved reasons are refused
    approval_pending: bool = False
    in_doubt: Sequence[Any] = ()  # the run's operations started or unknown, as the driver shows them
    wake_in: float | None = None  # a Suspend's wake_at, as seconds from now (the driver's clock)
    extra_payload: dict[str, Any] = field(default_factory=dict)


def _with_spent(state: dict[str, Any], budgets: Any, spent: dict[str, float]) -> EncodedState:
    """The step's new state with the budgets as they were plus what it spent (a step cannot change
    budgets)."""
    if isinstance(budgets, dict):
        return state_encode({**state, "budgets": budgets_spend(budgets, spent)})
    if budgets is not None:
        return state_encode({**state, "budgets": budgets})
    return state_encode(state)


def decide_outcome(rules: Rules, outcome: object, situation: Situation) -> m.WorkerMove | Invalid:
    """The move a step's outcome becomes, or why it cannot be committed."""
    s, step = situation, situation.step_id
    if not isinstance(outcome, Next | Suspend | Complete | Fail):
        return Invalid("invalid_step_result",
                       f"step {step!r} returned {type(outcome).__name__}, not Next/Suspend/Complete/Fail")  # fmt: skip
    try:
        if not isinstance(outcome.state, dict):
            raise InvalidState(f"state must be a JSON object, not {type(outcome.state).__name__}")
        budgets = json.loads(s.state.json).get("budgets")
        new_state = _with_spent(outcome.state, budgets, s.spent)
        if isinstance(outcome, Complete):
            canonical_json(outcome.result)
    except InvalidState as exc:
        return Invalid(exc.code, f"step {step!r} produced a state that cannot be stored: {exc.message}")
    except NotJSONSerializable as exc:
        return Invalid("invalid_step_result", f"step {step!r} returned a result that is not JSON: {exc}")
    # What an outside worker added to its event comes first: Keeper's own keys win.
    base = {**s.extra_payload, "workflow_version": s.workflow_version, "step": step, "spent": s.spent}
    if isinstance(outcome, Next):
        if rules.step(outcome.step) is None:
            return Invalid("unknown_step", f"step {step!r} moved to {outcome.step!r}, which does not exist")
        event_type, said = outcome.say if outcome.say is not None else ("step_completed", {})
        if event_type not in STEP_SAYS:
            return Invalid("invalid_step_result", f"step {step!r} cannot commit a {event_type!r} event")
        return m.StepCommitted(s.held, new_state, step, outcome.step, {**said, **base, "next_step": outcome.step},
                               event_type, s.keep_lease)  # fmt: skip
    if isinstance(outcome, Suspend):
        resume_at = outcome.step or step
        if rules.step(resume_at) is None:
            return Invalid(
                "unknown_step", f"step {step!r} asked to resume at {resume_at!r}, which does not exist"
            )
        if s.from_outside:
            if outcome.reason in RESERVED_REASONS:
                return Invalid(
                    "reserved_reason", f"suspend reason {outcome.reason!r} is Keeper's own; choose another"
                )
            if outcome.reason == APPROVAL_REASON and not s.approval_pending:
                return Invalid("approval_not_requested",
                               "approval_required needs a pending approval of this run: ask for it first (the "
                               "approval call answers wait), then commit this suspend")  # fmt: skip
            if outcome.reason == RECONCILIATION_REASON and not s.in_doubt:
                return Invalid("nothing_in_doubt",
                               "reconciliation_required needs an operation of this run in doubt (started, or "
                               "reported unknown); report the outcome you know instead")  # fmt: skip
        payload = {**base, "reason": outcome.reason, "detail": outcome.detail, "resume_at": resume_at}
        if outcome.wake_at is not None:
            payload["wake_at"] = outcome.wake_at.isoformat()
        return m.Suspended(
            s.held, new_state, resume_at, outcome.reason, outcome.detail, payload, step, s.wake_in
        )
    if s.in_doubt:
        # A run that ends with an operation in doubt would keep it there for ever: no inbox asks a
        # person about a finished run's operation, and its subject's erasure keeps the key.
        kind = "complete" if isinstance(outcome, Complete) else "fail"
        return Invalid("operations_in_doubt",
                       f"{kind} with {len(s.in_doubt)} operation(s) of this run in doubt (started, or reported "
                       "unknown): report each outcome first, or suspend with reconciliation_required for a "
                       "person to settle them", {"operations_in_doubt": list(s.in_doubt)})  # fmt: skip
    if isinstance(outcome, Complete):
        return m.Completed(s.held, new_state, step, outcome.result, base)
    return m.Failed(s.held, new_state, step, outcome.code, outcome.detail,
                    {**base, "code": outcome.code, "detail": outcome.detail})  # fmt: skip


def decide_invalid(situation: Situation, invalid: Invalid) -> m.Suspended:
    """Keeper's worker: a step whose outcome cannot be committed leaves the run suspended with why,
    at the state it had before the step."""
    s = situation
    payload = {"workflow_version": s.workflow_version, "step": s.step_id, "reason": invalid.code,
               "detail": invalid.detail}  # fmt: skip
    return m.Suspended(s.held, s.state, s.step_id, invalid.code, invalid.detail, payload)


def decide_step_error(
    situation: Situation, *, state: EncodedState, error: dict[str, str], attempt: int, max_attempts: int,
    retry_in: float,
) -> m.StepErrored:  # fmt: skip
    """A step raised: retried after `retry_in`, or, after its last attempt, the run suspended `step_error`."""
    s = situation
    base = {"workflow_version": s.workflow_version, "step": s.step_id, "spent": s.spent}
    if attempt >= max_attempts:
        detail = f"step {s.step_id!r} raised {error['error_type']} on all {attempt} attempts"
        return m.StepErrored(s.held, state, s.step_id, {**base, **error, "reason": "step_error", "detail": detail},
                             None, f"{detail}: {error['message']}")  # fmt: skip
    return m.StepErrored(s.held, state, s.step_id, {**base, **error, "retry_in_s": retry_in}, retry_in)
