"""Resume verification's reads and effects: the facts the kernel's checks decide over (runs.kernel.verify).

A driver that takes over a run (Keeper's worker, or the HTTP protocol for an outside worker) calls
resume_verify(): it reads the run's events, operations, approval and what the registry knows, lets
the kernel decide, and applies what verification settled (operations a lookup answered, retrieval
snapshots detached to re-fetch). The driver then writes the verdict as its move.

Accepting a changed state (an engineer's answer to `state_digest_mismatch` / `history_mismatch`)
lives here too: it is the other half of the same check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any
from uuid import UUID

from django.utils import timezone

from core.artifacts import artifacts_check
from core.errors import ApplicationError, Conflict, InvalidInput
from core.models import Tenant
from core.security import visible_text
from core.tenancy import tenant_scope
from retrieval.snapshots import snapshot_sources_changed, snapshots_detach
from runs.engine.operations import (
    operation_mark_not_applied,
    operation_mark_succeeded,
    operation_mark_unknown,
)
from runs.engine.registry import registry
from runs.engine.selectors import run_get
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import InvalidTransition, UnknownWorkflow
from runs.kernel.models import AgentEvent, AgentRun, Approval, RunStatus, ToolOperation
from runs.kernel.records import LeaseGrant
from runs.kernel.state import state_encode
from runs.kernel.verify import (
    ApprovalFact,
    EventFact,
    Facts,
    Lookup,
    PendingOperation,
    SourceChange,
    Verification,
    verify,
)

logger = logging.getLogger(__name__)

# An outside worker answers for its own tools' lookups (they are its code, not Keeper's).
WorkerLookups = dict[str, Lookup]


def resume_unavailable_detail(*, workflow_name: str, workflow_version: str) -> str:
    """What a person is told when this deployment has no such workflow version."""
    try:
        newest = registry.get(workflow_name).version
    except UnknownWorkflow:
        return f"workflow {workflow_name} is not registered here"
    return (
        f"this deployment has {workflow_name} version {newest}, not {workflow_version}; drain it on a worker "
        "that still runs that version, or finish it by hand"
    )


def _artifacts(grant: LeaseGrant) -> tuple[int, tuple[str, str] | None]:
    """Only blobs this tenant's records name are read back (within KEEPER_ARTIFACT_TIMEOUT, off this
    thread); any other {"digest": ...} in the state is the run's data, and a path or URI beside a
    digest is never opened. (How many were checked, the first failure's code and message.)"""
    try:
        checked = artifacts_check(tenant_id=grant.tenant_id, value=grant.state)
    except ApplicationError as exc:
        return 0, (exc.code, exc.message)
    return checked.verified, None


def _pending(run_id: UUID, statuses: Sequence[str]) -> list[PendingOperation]:
    found = []
    for op in ToolOperation.objects.filter(run_id=run_id, status__in=list(statuses)).order_by("created_at"):
        contract = registry.tool(op.tool_name)
        found.append(
            PendingOperation(
                op.operation_id,
                op.tool_name,
                op.status,
                op.tool_contract_version,
                contract.version if contract else None,
                op.call_deadline_at,
            )
        )
    return found


def _keeper_lookup(op: PendingOperation) -> Lookup | None:
    """Keeper's own tool's lookup (None: it has none)."""
    contract = registry.tool(op.tool_name)
    if contract is None or contract.lookup is None:
        return None
    found = contract.lookup(op.operation_id)
    if found is None:  # the lookup could not answer
        return None
    return Lookup(found.authoritative, found.applied, found.external_ref, found.result)


def _worker_lookup(answers: WorkerLookups, op: PendingOperation) -> Lookup | None:
    return answers.get(op.operation_id)


def _source_changes(grant: LeaseGrant) -> list[SourceChange]:
    changes = snapshot_sources_changed(tenant_id=grant.tenant_id, run_id=grant.run_id)
    return [SourceChange(c.snapshot_id, c.describe()) for c in changes]


def _approval(grant: LeaseGrant) -> Approval | None:
    """The approval the state references (state["approval"]["approval_id"]), if it is one."""
    ref = grant.state.get("approval")
    approval_id = ref.get("approval_id") if isinstance(ref, dict) else None
    try:
        return Approval.objects.filter(approval_id=UUID(str(approval_id)), tenant_id=grant.tenant_id).first()
    except ValueError:  # no reference, or not an id: no approval
        return None


def resume_facts(*, grant: LeaseGrant, lookup: Callable[[PendingOperation], Lookup | None]) -> Facts:
    """What verification decides over, for a run this worker holds the lease of."""
    events = [
        EventFact(seq, event_type, step_id, payload or {}, digest)
        for seq, event_type, step_id, payload, digest in AgentEvent.objects.filter(
            run_id=grant.run_id, tenant_id=grant.tenant_id
        )
        .order_by("seq")
        .values_list("seq", "event_type", "step_id", "payload", "state_digest")
    ]
    try:
        rules = registry.get(grant.workflow_name, grant.workflow_version)
        unavailable = ""
    except UnknownWorkflow:
        rules = None
        unavailable = resume_unavailable_detail(
            workflow_name=grant.workflow_name, workflow_version=grant.workflow_version
        )
    approval = None
    if rules is not None and grant.next_step in rules.approval_guarded_steps:
        row = _approval(grant)
        if row is not None:
            approval = ApprovalFact(str(row.approval_id), row.status, row.request_digest, row.expires_at)
    return Facts(
        grant=grant,
        now=timezone.now(),
        tenant_exists=Tenant.objects.filter(tenant_id=grant.tenant_id).exists(),
        rules=rules,
        unavailable_detail=unavailable,
        events=events,
        artifacts=partial(_artifacts, grant),
        pending=_pending(grant.run_id, ("prepared", "started", "unknown")),
        in_doubt=_pending(grant.run_id, ("started", "unknown")),
        approval=approval,
        source_changes=partial(_source_changes, grant),
        lookup=lookup,
    )


def resume_in_doubt(*, run_id: UUID) -> list[PendingOperation]:
    """The run's operations started or reported unknown: what a take-over must have looked up."""
    return _pending(run_id, ("started", "unknown"))


def resume_verify(*, grant: LeaseGrant, worker_lookups: WorkerLookups | None = None) -> Verification:
    """Run checks 1-7 (runs.kernel.verify) and apply what they settled. Operations in doubt are looked
    up with Keeper's own tools' lookups, or, for an outside worker, with the answers it gave."""
    lookup = _keeper_lookup if worker_lookups is None else partial(_worker_lookup, worker_lookups)
    verification = verify(resume_facts(grant=grant, lookup=lookup))
    actor = grant.owner
    for settled in verification.settlements:
        ids = {"tenant_id": grant.tenant_id, "operation_id": settled.operation_id, "actor": actor}
        if settled.to_status == "succeeded":
            operation_mark_succeeded(**ids, external_ref=settled.external_ref or "", result=settled.result,
                                     note=settled.note)  # fmt: skip
        elif settled.to_status == "not_applied":
            operation_mark_not_applied(**ids, note=settled.note)
        else:
            operation_mark_unknown(**ids, note=settled.note)
    if verification.detach_snapshot_ids:
        snapshots_detach(
            tenant_id=grant.tenant_id, run_id=grant.run_id, snapshot_ids=verification.detach_snapshot_ids
        )
    return verification


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
    events = AgentEvent.objects.filter(run=run, tenant_id=run.tenant_id)
    committed = events.order_by("-seq").values_list("state_digest", flat=True).first() or ""
    source = (
        events.filter(state__isnull=False, state_digest=committed)
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
        seq = apply(
            m.StateAccepted(
                run.run_id,
                run.tenant_id,
                run.state_revision,
                ACCEPTABLE_REFUSALS,
                state_encode(run.state),
                actor,
                detail,
                payload,
            )
        )
    if seq is None:
        raise StateChangedSinceShown(
            f"run {run.run_id} changed while accepting its state; nothing was written",
            code="concurrent_change",
        )
    return change
