"""An outside worker's side effects and approvals under its lease: the operation protocol and a
person's approval, as Keeper's own steps use them (runs.engine.operations, runs.engine.approvals)."""

from __future__ import annotations

from typing import Any

from core.digests import json_digest
from core.errors import InvalidInput, NotFound
from core.security import visible_text
from core.tenancy import tenant_bind
from runs.engine.approvals import approval_check
from runs.engine.operations import (
    operation_mark_failed,
    operation_mark_not_applied,
    operation_mark_started,
    operation_mark_succeeded,
    operation_mark_unknown,
    operation_prepare_once,
)
from runs.engine.registry import registry
from runs.external.protocol import held, lookups_answered, run_of
from runs.external.tokens import Lease
from runs.kernel.errors import SubjectErased
from runs.kernel.models import SUBJECT_ERASED, AgentRun, ToolOperation
from runs.kernel.records import OperationRow

OUTCOMES = ("succeeded", "failed", "unknown", "not_applied")


def _operation_of(run: AgentRun, operation_id: str) -> ToolOperation:
    op = ToolOperation.objects.filter(operation_id=operation_id, tenant_id=run.tenant_id).first()
    if op is None or op.run_id not in (run.run_id, run.parent_run_id):
        raise NotFound(
            f"no operation {operation_id} on run {run.run_id}: prepare it first", code="operation_not_found"
        )
    return op


def external_operation_prepare(
    *, lease: Lease, operation_id: str, tool_name: str, tool_contract_version: str, request: dict[str, Any]
) -> OperationRow:
    """Prepared once per operation id (the idempotency key to send outside); the row as it is now."""
    lookups_answered(lease)
    with tenant_bind(lease.tenant_id):
        run = held(lease)
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


def external_operation_started(
    *, lease: Lease, operation_id: str, call_timeout_s: float | None = None
) -> OperationRow:
    """Only the current lease holder may start a side effect (checked in the same statement). The
    call lasts `call_timeout_s` at most (else what Keeper's own tool says, else the default)."""
    lookups_answered(lease)
    with tenant_bind(lease.tenant_id):
        run = held(lease)
        op = _operation_of(run, operation_id)
        if call_timeout_s is None and (contract := registry.tool(op.tool_name)) is not None:
            call_timeout_s = contract.call_timeout()
        return operation_mark_started(
            tenant_id=lease.tenant_id,
            operation_id=operation_id,
            actor=lease.owner,
            run_id=run.run_id,
            lease_epoch=lease.epoch,
            call_timeout_s=call_timeout_s,
        )


def external_operation_outcome(
    *, lease: Lease, operation_id: str, outcome: str, external_ref: str | None, result: Any, note: str
) -> OperationRow:
    """What the outside system answered. A timeout or a dropped connection is `unknown`, never `failed`;
    `not_applied` only after an authoritative lookup by the idempotency key said so."""
    with tenant_bind(lease.tenant_id):
        run = run_of(lease)
        # An outcome may come after the lease is lost (the money's truth), but not into a run whose
        # subject was erased (a run cancelled after the erasure keeps only its erased subject): its
        # result and reference could carry them back after the receipt. A person settles it: the
        # support inbox lists the operation.
        if run.suspend_reason == SUBJECT_ERASED or run.subject.startswith("erased:"):
            raise SubjectErased(
                f"run {run.run_id}'s subject was erased: nothing more is written to it; ask a person to "
                f"reconcile operation {operation_id} (the support inbox lists it)",
                details={"status": run.status, "suspend_reason": run.suspend_reason},
            )
        _operation_of(run, operation_id)
        ids = {"tenant_id": lease.tenant_id, "operation_id": operation_id, "actor": lease.owner}
        # After a lost lease, the outside system's answer still settles the operation, even one a
        # take-over's lookup found not applied meanwhile: what the outside system did is the truth.
        if outcome == "succeeded":
            return operation_mark_succeeded(
                **ids, external_ref=external_ref or "", result=result, note=note, late=True
            )
        if outcome == "failed":
            return operation_mark_failed(**ids, result=result, note=note, late=True)
        if outcome == "unknown":
            # The worker saw its call end without an answer it can trust: nothing is in flight from its side.
            return operation_mark_unknown(**ids, note=note or "the worker could not tell", call_ended=True)
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
    lookups_answered(lease)
    with tenant_bind(lease.tenant_id):
        run = held(lease)
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
