"""Resume verification, decided: the chapter's checks over facts a driver gathered, in order.

Before a suspended run continues (a person's resume, an approval, a reconciliation) or a worker takes
over an expired lease, these checks run in order and stop at the first that fails; every outcome goes
into one `resume_verified` or `resume_refused` event. A refusal leaves the run suspended with a reason
code and a sentence for a person; it never "continues anyway".

The function is pure: the facts (the run's events, its operations, its approval, what the registry
knows of its workflow and tools) are read by the driver beforehand (runs.engine.resume). Two inputs
are asked for only when the checks get that far: whether a retrieval source changed, and what a
tool's lookup says of an operation in doubt (Keeper's own tools' lookups for Keeper's workers; the
worker's answers for an outside worker). What verification changes elsewhere (operations settled by
a lookup, snapshots detached to re-fetch) is returned, for the driver to apply before its move.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Protocol

from runs.kernel.budgets import budgets_deadline_passed, budgets_exhausted, budgets_recompute
from runs.kernel.records import LeaseGrant
from runs.kernel.state import state_encode

IN_FLIGHT = "operation_in_flight"  # not a refusal for a person: the driver looks again after retry_in
STEP_EVENTS = ("step_completed", "step_error", "run_completed", "run_failed", "assistant_message")


class Schemas(Protocol):
    current: int

    def path_exists(self, from_version: int) -> bool: ...


class Rules(Protocol):
    """What verification and the step decisions need of a workflow (registry.Workflow is one)."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def state_schema_version(self) -> int: ...

    @property
    def on_source_change(self) -> str: ...

    @property
    def approval_guarded_steps(self) -> frozenset[str]: ...

    @property
    def approval_asked_at(self) -> dict[str, str]: ...

    @property
    def schemas(self) -> Any: ...

    def step(self, name: str) -> object | None: ...


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    code: str = ""
    detail: str = ""


@dataclass(frozen=True)
class EventFact:
    seq: int
    event_type: str
    step_id: str | None
    payload: dict[str, Any]
    state_digest: str


@dataclass(frozen=True)
class PendingOperation:
    """An operation not settled yet, with the contract version this code has for its tool."""

    operation_id: str
    tool_name: str
    status: str
    contract_version: str
    current_contract_version: str | None
    call_deadline_at: datetime | None = None  # before it, "not applied" may mean "still in flight"


@dataclass(frozen=True)
class Lookup:
    """What the outside system says of an operation, found by its idempotency key."""

    authoritative: bool
    applied: bool | None
    external_ref: str | None = None
    result: Any = None


@dataclass(frozen=True)
class ApprovalFact:
    approval_id: str
    status: str
    request_digest: str
    expires_at: datetime


@dataclass(frozen=True)
class SourceChange:
    snapshot_id: str
    description: str


@dataclass(frozen=True)
class Settlement:
    """An operation settled by verification's lookup: the driver moves it before the run's move."""

    operation_id: str
    to_status: str  # succeeded | not_applied | unknown
    note: str
    external_ref: str | None = None
    result: Any = None


@dataclass(frozen=True)
class Facts:
    grant: LeaseGrant
    now: datetime
    tenant_exists: bool
    rules: Rules | None
    unavailable_detail: str  # why `rules` is None, for a person
    events: Sequence[EventFact]
    pending: Sequence[PendingOperation]
    in_doubt: Sequence[PendingOperation]  # started or unknown
    approval: ApprovalFact | None
    # Asked only when the checks get that far: the stored artifacts the state refers to (how many were
    # read back and checked, and the first failure's code and message), changed retrieval sources, and
    # what a tool's lookup says of an operation.
    artifacts: Callable[[], tuple[int, tuple[str, str] | None]]
    source_changes: Callable[[], Sequence[SourceChange]]
    lookup: Callable[[PendingOperation], Lookup | None]  # None: nobody can look it up


@dataclass
class Verification:
    checks: list[Check] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    # The digest the last event committed: what the stored state must match (None without events).
    committed_digest: str | None = None
    settlements: list[Settlement] = field(default_factory=list)
    detach_snapshot_ids: list[str] = field(default_factory=list)
    # A refusal that only asks to look again later (IN_FLIGHT): in this many seconds.
    retry_in: float | None = None

    @property
    def refusal(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)

    def as_payload(self) -> list[dict[str, Any]]:
        return [asdict(c) for c in self.checks]


class _Refused(Exception):
    def __init__(self, check: Check):
        self.check = check


def _refuse(name: str, code: str, detail: str) -> _Refused:
    return _Refused(Check(name, False, code, detail))


def verify(facts: Facts) -> Verification:
    """Checks 1-7 for a run the caller holds the lease of. Check 8 is the caller's move."""
    result = Verification(state=dict(facts.grant.state))
    result.committed_digest = facts.events[-1].state_digest if facts.events else None
    for check in (_lease, _tenant_workflow_schema, _artifacts_and_contracts, _event_log, _operations,
                  _approvals, _budgets):  # fmt: skip
        try:
            result.checks.append(check(facts, result))
        except _Refused as refused:
            result.checks.append(refused.check)
            break
    return result


def event_payload(*, grant: LeaseGrant, verification: Verification) -> dict[str, Any]:
    """What `resume_verified` and `resume_refused` record: why the run continues (a person asked, or
    a lease was taken over) and every check."""
    return {
        "workflow_version": grant.workflow_version,
        "step": grant.next_step,
        "trigger": "resume_request" if grant.status == "suspended" else "lease_takeover",
        "checks": verification.as_payload(),
        "epoch": grant.epoch,
        "previous_owner": grant.previous_owner,
        "previous_epoch": grant.previous_epoch,
        "requested_by": grant.resume_requested_by or None,
    }


def _lease(facts: Facts, result: Verification) -> Check:
    # Taken atomically together with the revision this verification reads (the LeaseTaken move).
    grant = facts.grant
    return Check("lease_and_revision", True, detail=f"epoch {grant.epoch} at revision {grant.revision}")


def _tenant_workflow_schema(facts: Facts, result: Verification) -> Check:
    name, grant, workflow = "tenant_workflow_schema", facts.grant, facts.rules
    if not facts.tenant_exists:
        raise _refuse(name, "tenant_unknown", f"tenant {grant.tenant_id} no longer exists")
    if workflow is None:
        raise _refuse(name, "workflow_version_unavailable", facts.unavailable_detail)
    accepted = max((e.seq for e in facts.events if e.event_type == "state_accepted"), default=0)
    for event in facts.events:
        if event.event_type not in STEP_EVENTS or event.step_id is None or event.seq <= accepted:
            continue  # a person accepted those
        recorded = event.payload.get("workflow_version")
        if workflow.step(event.step_id) is None or (recorded is not None and recorded != workflow.version):
            raise _refuse(
                name,
                "history_mismatch",
                f"event {event.seq} ran step {event.step_id!r} of version {recorded}, which this code "
                f"({workflow.name} {workflow.version}) does not have; it will not guess",
            )
    if workflow.step(grant.next_step) is None:
        raise _refuse(
            name, "unknown_step", f"{workflow.name} {workflow.version} has no step {grant.next_step!r}"
        )
    version = grant.state_schema_version
    if workflow.schemas is not None and not workflow.schemas.path_exists(version):
        raise _refuse(
            name,
            "unsupported_checkpoint",
            f"no migration path from state-schema version {version} to {workflow.state_schema_version}",
        )
    if workflow.schemas is None and version != workflow.state_schema_version:
        raise _refuse(
            name,
            "unsupported_checkpoint",
            f"state-schema version {version} is not {workflow.state_schema_version} and has no migrations",
        )
    detail = f"{workflow.name} {workflow.version}, state schema {version}"
    if version != workflow.state_schema_version:
        detail += f" (migration to {workflow.state_schema_version} available)"
    return Check(name, True, detail=detail)


def _artifacts_and_contracts(facts: Facts, result: Verification) -> Check:
    name = "artifacts_and_contracts"
    checked, failure = facts.artifacts()
    if failure is not None:
        raise _refuse(name, *failure)
    for op in facts.pending:
        if op.current_contract_version is None or op.current_contract_version != op.contract_version:
            raise _refuse(
                name,
                "tool_contract_changed",
                f"operation {op.operation_id} was prepared under {op.contract_version}; this code has "
                f"{op.current_contract_version or 'no contract'}",
            )
    sources = _sources(facts, result)
    return Check(
        name,
        True,
        detail=f"{checked} artifact(s), {len(facts.pending)} pending operation(s) checked{sources}",
    )


def _sources(facts: Facts, result: Verification) -> str:
    """The retrieval documents behind the run's snapshots: a deleted or newer one stops the run, or (a
    workflow with on_source_change="refetch") detaches those snapshots so the run searches again."""
    changes = list(facts.source_changes())
    if not changes:
        return ""
    described = "; ".join(c.description for c in changes[:10]) + (" ..." if len(changes) > 10 else "")
    policy = facts.rules.on_source_change if facts.rules is not None else "stop"
    if policy != "refetch":
        raise _refuse(
            "artifacts_and_contracts",
            "source_changed",
            f"a retrieval source behind this run changed: {described}; fork or rewind to before the "
            "search, or resume it under a workflow that re-fetches",
        )
    result.detach_snapshot_ids = sorted({c.snapshot_id for c in changes})
    return f"; {len(result.detach_snapshot_ids)} snapshot(s) detached to re-fetch: {described}"


def _event_log(facts: Facts, result: Verification) -> Check:
    name, grant = "event_log", facts.grant
    seqs = [e.seq for e in facts.events]
    if seqs != list(range(1, grant.revision + 1)):
        missing = sorted(set(range(1, grant.revision + 1)) - set(seqs))
        raise _refuse(
            name,
            "event_seq_gap",
            f"revision {grant.revision} but events {seqs[:1]}..{seqs[-1:]} (missing {missing[:10]})",
        )
    digest = state_encode(grant.state).digest
    if facts.events[-1].state_digest != digest:
        raise _refuse(
            name,
            "state_digest_mismatch",
            f"the stored state's digest {digest} is not the one event {seqs[-1]} committed "
            f"({facts.events[-1].state_digest}): the state was changed outside the engine",
        )
    return Check(name, True, detail=f"{len(seqs)} events continuous; state digest matches event {seqs[-1]}")


def _operations(facts: Facts, result: Verification) -> Check:
    """Operations in doubt (started, or reported unknown) are settled by a lookup before the run goes
    on: an authoritative "applied" marks them succeeded, an authoritative "not applied" allows one more
    send; anything else (no lookup, not authoritative) needs a person."""
    name, settled = "operations", []
    for op in facts.in_doubt:
        lookup = facts.lookup(op)
        if lookup is not None and lookup.authoritative and lookup.applied and lookup.external_ref:
            result.settlements.append(
                Settlement(
                    op.operation_id,
                    "succeeded",
                    "resume: lookup found it applied",
                    lookup.external_ref,
                    lookup.result,
                )  # fmt: skip
            )
            settled.append(f"{op.operation_id}: applied")
        elif (
            lookup is not None and lookup.authoritative and lookup.applied is False and _in_flight(op, facts)
        ):
            wait = (op.call_deadline_at - facts.now).total_seconds() if op.call_deadline_at else 0.0
            result.retry_in = max(wait, 0.001)
            raise _refuse(
                name,
                IN_FLIGHT,
                f"operation {op.operation_id} was started less than its call's timeout ago: the lookup's "
                f"'not applied' may describe a request still on its way; looked up again in {wait:.0f} s",
            )
        elif lookup is not None and lookup.authoritative and lookup.applied is False:
            result.settlements.append(
                Settlement(op.operation_id, "not_applied", "resume: authoritative lookup says not applied")
            )
            settled.append(f"{op.operation_id}: not applied")
        else:
            if op.status == "started":
                result.settlements.append(
                    Settlement(op.operation_id, "unknown", "resume: lookup not authoritative")
                )
            why = "has no authoritative lookup" if lookup is None else "lookup is not authoritative"
            raise _refuse(
                name,
                "reconciliation_required",
                f"operation {op.operation_id} may have been applied and the tool {why}; check it and reconcile",
            )
    return Check(name, True, detail="; ".join(settled) or "no operation in doubt")


def _in_flight(op: PendingOperation, facts: Facts) -> bool:
    return op.call_deadline_at is not None and op.call_deadline_at > facts.now


def _approvals(facts: Facts, result: Verification) -> Check:
    name, grant, workflow = "approvals", facts.grant, facts.rules
    if workflow is None or grant.next_step not in workflow.approval_guarded_steps:
        return Check(name, True, detail="the next step does not act on an approval")
    approval = facts.approval
    if approval is None or approval.status != "approved":
        raise _refuse(
            name, "approval_missing", f"step {grant.next_step!r} needs an approved request; none is"
        )
    if approval.request_digest != grant.state.get("request_digest"):
        raise _refuse(
            name,
            "approval_digest_mismatch",
            f"approval {approval.approval_id} is for {approval.request_digest}, the run's request is "
            f"{grant.state.get('request_digest')}",
        )
    if approval.expires_at <= facts.now:
        expired = f"approval {approval.approval_id} expired at {approval.expires_at.isoformat()}"
        asked_at = workflow.approval_asked_at.get(grant.next_step)
        if asked_at is None:
            raise _refuse(name, "approval_expired", f"{expired}; rewind to the approval step to ask again")
        # The step checks its approval again before it acts and goes back to ask for a new one (an
        # operation already settled is answered without it): a lapse of time, not a doubt.
        return Check(
            name, True, detail=f"{expired}; step {grant.next_step!r} goes back to {asked_at!r} to ask again"
        )
    return Check(
        name, True, detail=f"approval {approval.approval_id} valid until {approval.expires_at.isoformat()}"
    )


def _budgets(facts: Facts, result: Verification) -> Check:
    name = "budgets"
    budgets = facts.grant.state.get("budgets")
    if not isinstance(budgets, dict):
        return Check(name, True, detail="no budgets on this run")
    # Step events and model_usage events (model calls made outside a step) carry what they spent.
    recomputed = budgets_recompute(budgets, ((e.payload or {}).get("spent") or {} for e in facts.events))
    changed = recomputed != budgets
    result.state = {**result.state, "budgets": recomputed}
    passed = budgets_deadline_passed(recomputed, now=facts.now)
    if passed:
        raise _refuse(name, "deadline_passed", passed)
    exhausted = budgets_exhausted(recomputed)
    if exhausted:
        raise _refuse(
            name,
            "budget_exhausted",
            ", ".join(f"{k} {recomputed[k]['used']}/{recomputed[k]['limit']}" for k in exhausted),
        )
    detail = "recomputed from events" + (
        " (the stored totals were wrong and were replaced)" if changed else ""
    )
    return Check(name, True, detail=detail)
