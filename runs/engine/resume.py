"""Resume verification: before a suspended run continues, or a worker takes over an expired lease.

The checks run in the chapter's order and stop at the first that fails; every outcome goes into
one `resume_verified` or `resume_refused` event. A refusal leaves the run suspended with a reason
code and a sentence for a person; it never "continues anyway".

Over 400 lines on purpose: each resume check and the decision it feeds are read together.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any
from uuid import UUID

from django.db.models import Q
from django.utils import timezone

from core.artifacts import artifacts_check
from core.digests import canonical_json
from core.errors import ApplicationError, Conflict, InvalidInput
from core.models import Tenant
from core.security import visible_text
from core.tenancy import tenant_scope
from retrieval.search import snapshot_sources_changed, snapshots_detach
from runs.engine import store
from runs.engine.budgets import budgets_deadline_passed, budgets_exhausted, budgets_recompute
from runs.engine.errors import InvalidTransition, UnknownWorkflow
from runs.engine.models import AgentEvent, AgentRun, Approval, ApprovalStatus, RunStatus, ToolOperation
from runs.engine.operations import (
    operation_mark_not_applied,
    operation_mark_succeeded,
    operation_mark_unknown,
)
from runs.engine.registry import Workflow, registry
from runs.engine.selectors import run_get
from runs.engine.state import state_encode
from runs.engine.store import LeaseGrant

logger = logging.getLogger(__name__)

STEP_EVENTS = ("step_completed", "step_error", "run_completed", "run_failed", "assistant_message")


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    code: str = ""
    detail: str = ""


@dataclass
class Verification:
    checks: list[Check] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    workflow: Workflow | None = None
    # The digest the last event committed: what the stored state must match (None without events).
    committed_digest: str | None = None

    @property
    def refusal(self) -> Check | None:
        return next((c for c in self.checks if not c.ok), None)

    def as_payload(self) -> list[dict[str, Any]]:
        return [asdict(c) for c in self.checks]


class _Refused(Exception):
    def __init__(self, check: Check):
        self.check = check


def resume_event_payload(*, grant: LeaseGrant, verification: Verification) -> dict[str, Any]:
    """What `resume_verified` and `resume_refused` record, for Keeper's workers and outside ones alike:
    why the run continues (a person asked, or a lease was taken over) and every check."""
    return {
        "workflow_version": grant.workflow_version,
        "step": grant.next_step,
        "trigger": "resume_request" if grant.status == RunStatus.SUSPENDED else "lease_takeover",
        "checks": verification.as_payload(),
        "epoch": grant.epoch,
        "previous_owner": grant.previous_owner,
        "previous_epoch": grant.previous_epoch,
        "requested_by": grant.resume_requested_by or None,
    }


def resume_verify(*, grant: LeaseGrant) -> Verification:
    """Run checks 1-7 for a run this worker holds the lease of. Check 8 is the caller's commit."""
    result = Verification(state=dict(grant.state))
    events = list(
        AgentEvent.objects.filter(run_id=grant.run_id)
        .order_by("seq")
        .values_list("seq", "event_type", "step_id", "payload", "state_digest")
    )
    result.committed_digest = events[-1][4] if events else None
    checks = (
        _lease,
        _tenant_workflow_schema,
        _artifacts_and_contracts,
        _event_log,
        _operations,
        _approvals,
        _budgets,
    )
    for check in checks:
        try:
            result.checks.append(check(grant, result, events))
        except _Refused as refused:
            result.checks.append(refused.check)
            break
    return result


def _refuse(name: str, code: str, detail: str) -> _Refused:
    return _Refused(Check(name, False, code, detail))


def _lease(grant: LeaseGrant, result: Verification, events: list[Any]) -> Check:
    # Taken atomically together with the revision this verification reads (store.lease_acquire).
    return Check("lease_and_revision", True, detail=f"epoch {grant.epoch} at revision {grant.revision}")


def _tenant_workflow_schema(grant: LeaseGrant, result: Verification, events: list[Any]) -> Check:
    name = "tenant_workflow_schema"
    if not Tenant.objects.filter(tenant_id=grant.tenant_id).exists():
        raise _refuse(name, "tenant_unknown", f"tenant {grant.tenant_id} no longer exists")
    try:
        workflow = registry.get(grant.workflow_name, grant.workflow_version)
    except UnknownWorkflow:
        try:
            newest = registry.get(grant.workflow_name).version
        except UnknownWorkflow:
            newest = None
        detail = (
            (
                f"this deployment has {grant.workflow_name} version {newest}, not {grant.workflow_version}; "
                "drain it on a worker that still runs that version, or finish it by hand"
            )
            if newest
            else (f"workflow {grant.workflow_name} is not registered here")
        )
        raise _refuse(name, "workflow_version_unavailable", detail) from None
    result.workflow = workflow
    accepted = max((e[0] for e in events if e[1] == "state_accepted"), default=0)
    for seq, event_type, step_id, payload, _ in events:
        if event_type not in STEP_EVENTS or step_id is None or seq <= accepted:  # a person accepted those
            continue
        recorded = (payload or {}).get("workflow_version")
        if workflow.step(step_id) is None or (recorded is not None and recorded != workflow.version):
            raise _refuse(
                name,
                "history_mismatch",
                f"event {seq} ran step {step_id!r} of version {recorded}, which this code "
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


def _artifacts_and_contracts(grant: LeaseGrant, result: Verification, events: list[Any]) -> Check:
    name = "artifacts_and_contracts"
    # Only blobs this tenant's records name are read back (within KEEPER_ARTIFACT_TIMEOUT, off this
    # thread); any other {"digest": ...} in the state is the run's data, and a path or URI beside a
    # digest is never opened.
    try:
        artifacts = artifacts_check(tenant_id=grant.tenant_id, value=grant.state)
    except ApplicationError as exc:
        raise _refuse(name, exc.code, exc.message) from None
    pending = ToolOperation.objects.filter(run_id=grant.run_id, status__in=["prepared", "started", "unknown"])
    for op in pending:
        contract = registry.tool(op.tool_name)
        if contract is None or contract.version != op.tool_contract_version:
            now = contract.version if contract else "no contract"
            raise _refuse(
                name,
                "tool_contract_changed",
                f"operation {op.operation_id} was prepared under {op.tool_contract_version}; this code has "
                f"{now}",
            )
    sources = _sources(grant, result)
    return Check(
        name,
        True,
        detail=f"{artifacts.verified} artifact(s), {len(pending)} pending operation(s) checked{sources}",
    )


def _sources(grant: LeaseGrant, result: Verification) -> str:
    """The retrieval documents behind the run's snapshots: a deleted or newer one stops the run, or
    (a workflow with on_source_change="refetch") detaches those snapshots so the run searches again."""
    changes = snapshot_sources_changed(tenant_id=grant.tenant_id, run_id=grant.run_id)
    if not changes:
        return ""
    described = "; ".join(c.describe() for c in changes[:10]) + (" ..." if len(changes) > 10 else "")
    policy = result.workflow.on_source_change if result.workflow is not None else "stop"
    if policy != "refetch":
        raise _refuse(
            "artifacts_and_contracts",
            "source_changed",
            f"a retrieval source behind this run changed: {described}; fork or rewind to before the "
            "search, or resume it under a workflow that re-fetches",
        )
    detached = snapshots_detach(
        tenant_id=grant.tenant_id, run_id=grant.run_id, snapshot_ids=sorted({c.snapshot_id for c in changes})
    )
    return f"; {detached} snapshot(s) detached to re-fetch: {described}"


def _event_log(grant: LeaseGrant, result: Verification, events: list[Any]) -> Check:
    name = "event_log"
    seqs = [e[0] for e in events]
    if seqs != list(range(1, grant.revision + 1)):
        missing = sorted(set(range(1, grant.revision + 1)) - set(seqs))
        raise _refuse(
            name,
            "event_seq_gap",
            f"revision {grant.revision} but events {seqs[:1]}..{seqs[-1:]} (missing {missing[:10]})",
        )
    digest = state_encode(grant.state).digest
    if events[-1][4] != digest:
        raise _refuse(
            name,
            "state_digest_mismatch",
            f"the stored state's digest {digest} is not the one event {seqs[-1]} committed "
            f"({events[-1][4]}): the state was changed outside the engine",
        )
    return Check(name, True, detail=f"{len(seqs)} events continuous; state digest matches event {seqs[-1]}")


def _operations(grant: LeaseGrant, result: Verification, events: list[Any]) -> Check:
    name = "operations"
    open_ops = ToolOperation.objects.filter(run_id=grant.run_id, status__in=["started", "unknown"])
    settled = []
    for op in open_ops:
        ids = {"tenant_id": op.tenant_id, "operation_id": op.operation_id, "actor": grant.owner}
        contract = registry.tool(op.tool_name)
        lookup = contract.lookup(op.operation_id) if contract and contract.lookup else None
        if lookup is not None and lookup.authoritative and lookup.applied and lookup.external_ref:
            operation_mark_succeeded(
                **ids,
                external_ref=lookup.external_ref,
                result=lookup.result,
                note="resume: lookup found it applied",
            )
            settled.append(f"{op.operation_id}: applied")
        elif lookup is not None and lookup.authoritative and lookup.applied is False:
            operation_mark_not_applied(**ids, note="resume: authoritative lookup says not applied")
            settled.append(f"{op.operation_id}: not applied")
        else:
            if op.status == "started":
                operation_mark_unknown(**ids, note="resume: lookup not authoritative")
            why = "has no authoritative lookup" if lookup is None else "lookup is not authoritative"
            raise _refuse(
                name,
                "reconciliation_required",
                f"operation {op.operation_id} may have been applied and the tool {why}; "
                "check it and reconcile",
            )
    return Check(name, True, detail="; ".join(settled) or "no operation in doubt")


def _approvals(grant: LeaseGrant, result: Verification, events: list[Any]) -> Check:
    name = "approvals"
    workflow = result.workflow
    if workflow is None or grant.next_step not in workflow.approval_guarded_steps:
        return Check(name, True, detail="the next step does not act on an approval")
    ref = grant.state.get("approval") or {}
    approval = Approval.objects.filter(
        Q(approval_id=ref.get("approval_id")) if ref.get("approval_id") else Q(pk=None)
    ).first()
    if approval is None or approval.status != ApprovalStatus.APPROVED:
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
    if approval.expires_at <= timezone.now():
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


def _budgets(grant: LeaseGrant, result: Verification, events: list[Any]) -> Check:
    name = "budgets"
    budgets = grant.state.get("budgets")
    if not isinstance(budgets, dict):
        return Check(name, True, detail="no budgets on this run")
    # Step events and model_usage events (model calls made outside a step) carry what they spent.
    recomputed = budgets_recompute(budgets, ((e[3] or {}).get("spent") or {} for e in events))
    changed = recomputed != budgets
    result.state = {**result.state, "budgets": recomputed}
    passed = budgets_deadline_passed(recomputed)
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


# --- accepting a changed state ------------------------------------------------------------------

ACCEPTABLE_REFUSALS = ("state_digest_mismatch", "history_mismatch")


class StateNotRefused(InvalidTransition):
    code = "state_not_refused"


class StateChangedSinceShown(Conflict):
    code = "state_changed"


@dataclass(frozen=True)
class StateChange:
    """What an engineer accepts: the state the last event committed and the state stored now."""

    run: AgentRun
    refused_code: str
    committed_digest: str
    committed_state: Any  # None when no event holds a copy of that state
    current_digest: str
    current_state: dict[str, Any]


def run_state_change(*, run: AgentRun) -> StateChange:
    """The two states of a run refused for a changed state or history (else StateNotRefused)."""
    if run.status != RunStatus.SUSPENDED or run.suspend_reason not in ACCEPTABLE_REFUSALS:
        raise StateNotRefused(
            f"run {run.run_id} is {run.status} ({run.suspend_reason or 'no refusal'}); only a run refused for "
            f"{' or '.join(ACCEPTABLE_REFUSALS)} has a changed state to accept",
            details={"status": run.status, "suspend_reason": run.suspend_reason},
        )
    last = AgentEvent.objects.filter(run=run).order_by("-seq").values_list("state_digest", flat=True).first()
    committed = last or ""
    source = (
        AgentEvent.objects.filter(run=run, state__isnull=False, state_digest=committed)
        .order_by("-seq")
        .values_list("state", flat=True)
        .first()
    )
    try:
        current = state_encode(run.state).digest
    except ApplicationError as exc:
        raise InvalidInput(
            f"the stored state cannot be accepted: {exc.message}", code="state_not_acceptable"
        ) from None
    return StateChange(
        run=run,
        refused_code=run.suspend_reason or "",
        committed_digest=committed,
        committed_state=source,
        current_digest=current,
        current_state=run.state,
    )


def run_state_accept(
    *, run_id: UUID, actor: str, note: str, expected_digest: str | None = None
) -> StateChange:
    """An engineer accepts the state (and history) a run was refused for, with a note saying why.

    Recorded as its own `state_accepted` event with both digests; the run stays suspended until
    someone resumes it, and that resume is verified against the accepted digest. With
    `expected_digest`, only the state the engineer was shown is accepted.
    """
    note = visible_text(note or "")
    if not note:
        raise InvalidInput("accepting a changed state needs a note saying why", code="note_required")
    run = run_get(run_id=run_id)
    registry.refuse_outside(workflow_name=run.workflow_name, run_id=run_id, action="given an accepted state")
    change = run_state_change(run=run)
    if expected_digest is not None and expected_digest != change.current_digest:
        raise StateChangedSinceShown(
            f"the stored state is now {change.current_digest}, not the {expected_digest} you were shown; "
            "look again before accepting",
            details={"current_digest": change.current_digest},
        )
    payload = {
        "refused_code": change.refused_code,
        "digest_before": change.committed_digest,
        "digest_after": change.current_digest,
        "note": note,
    }
    detail = f"{actor} accepted the changed state ({change.current_digest}); resume to continue"
    with tenant_scope(run.tenant_id):
        seq = store.state_accept(
            run_id=run.run_id,
            expected_revision=run.state_revision,
            reasons=ACCEPTABLE_REFUSALS,
            state_json=state_encode(run.state).json,
            state_digest=change.current_digest,
            actor=actor,
            detail=detail,
            payload_json=canonical_json(payload),
        )
    if seq is None:
        raise StateChangedSinceShown(
            f"run {run.run_id} changed while accepting its state; nothing was written",
            code="concurrent_change",
        )
    return change
