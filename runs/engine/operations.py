"""The idempotent protocol for external side effects: prepare once, start, then an outcome.

prepared → started → succeeded | failed | unknown. A timeout or broken connection after the
request was sent is `unknown`, never `failed`: the effect may have happened. Before sending again,
`started`/`unknown` operations are reconciled by their idempotency key (the operation id): only an
authoritative "not applied" returns them to `prepared`. Anything less suspends the run for a person.
"""

from __future__ import annotations

import math
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.digests import canonical_json, json_digest
from core.errors import Conflict, InvalidInput, NotFound
from core.security import visible_text
from core.tenancy import tenant_of_call
from core.tracing import span
from runs.engine import operation_statements as statements
from runs.engine.dispatch import run_enqueue_on_commit
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.errors import InvalidTransition
from runs.kernel.models import SUBJECT_ERASED, AgentRun, RunStatus, ToolOperation
from runs.kernel.records import OperationRow


class OperationRequestChanged(Conflict):
    """The operation id was prepared before for a different request: sending it would be a guess."""

    code = "operation_request_changed"


class OperationOfAnotherRun(Conflict):
    """The operation id was prepared by a run this one was not forked from: its outcome is that run's,
    and reporting it as this run's would claim an effect this run never caused."""

    code = "operation_of_another_run"


class OperationStateConflict(Conflict):
    code = "operation_state_conflict"


class OperationInFlight(Conflict):
    """A lookup says "not applied" before the operation's call could have ended: the request may still
    be on its way, so sending it again could apply it twice. Ask again after `retry_after` seconds."""

    code = "operation_in_flight"


@tenant_of_call
def operation_prepare_once(
    *,
    tenant_id: UUID,
    run_id: UUID,
    step_id: str,
    operation_id: str,
    tool_name: str,
    tool_contract_version: str,
    request: dict[str, Any],
    actor: str,
) -> OperationRow:
    digest = json_digest(request)
    op = statements.operation_prepare_once(
        tenant_id=tenant_id,
        operation_id=operation_id,
        run_id=run_id,
        step_id=step_id,
        tool_name=tool_name,
        tool_contract_version=tool_contract_version,
        request_digest=digest,
        actor=actor,
    )
    if op.run_id != run_id and op.run_id not in run_lineage(run_id):
        raise OperationOfAnotherRun(
            f"operation {operation_id} belongs to run {op.run_id}, which this run was not forked from: "
            "an operation id names one effect of one run (and its forks); this run cannot go on with it "
            "(cancel it, or start the work under another operation id)",
            details={"operation_id": operation_id, "run_id": str(op.run_id)},
        )
    if op.request_digest != digest:
        raise OperationRequestChanged(
            f"operation {operation_id} was prepared for request {op.request_digest}, now asked for {digest}",
            details={"operation_id": operation_id, "prepared_digest": op.request_digest, "digest": digest},
        )
    return op


def run_lineage(run_id: UUID) -> set[UUID]:
    """The run and every run it was forked from (a fork acts on its parents' operations), read in the
    caller's tenant scope."""
    with connection.cursor() as cursor:
        cursor.execute(
            """WITH RECURSIVE up(run_id, parent, depth) AS (
                   SELECT run_id, parent_run_id, 0 FROM agent_runs WHERE run_id = %s
                   UNION ALL
                   SELECT r.run_id, r.parent_run_id, up.depth + 1 FROM agent_runs r
                     JOIN up ON r.run_id = up.parent WHERE up.depth < 10000)
               SELECT run_id FROM up""",
            [run_id],
        )
        return {row[0] for row in cursor.fetchall()}


def _move(
    *,
    tenant_id: UUID,
    operation_id: str,
    to_status: str,
    actor: str,
    note: str = "",
    external_ref: str | None = None,
    result: Any = None,
    lease_epoch: int | None = None,
    acting_run_id: UUID | None = None,
    late: bool = False,
    call_timeout: float = 0.0,
    call_ended: bool = False,
) -> OperationRow:
    attributes = {"keeper.tenant_id": tenant_id, "keeper.run_id": acting_run_id, "keeper.outcome": to_status}
    with span("keeper.operation", attributes):
        op = statements.operation_transition(
            tenant_id=tenant_id,
            operation_id=operation_id,
            to_status=to_status,
            actor=actor,
            note=note,
            external_ref=external_ref,
            result_json=None if result is None else canonical_json(result),
            lease_epoch=lease_epoch,
            acting_run_id=acting_run_id,
            late=late,
            call_timeout=call_timeout,
            call_ended=call_ended,
        )
    if op is None:
        current = ToolOperation.objects.filter(tenant_id=tenant_id, operation_id=operation_id).first()
        if current is None:
            raise NotFound(f"no operation {operation_id}", code="operation_not_found")
        if _same_outcome(current, to_status, external_ref, result):
            # The same outcome sent again (its answer was lost): the answer, and nothing written twice.
            return OperationRow(
                current.operation_id,
                current.run_id,
                current.status,
                current.request_digest,
                current.tool_contract_version,
                current.external_ref,
                current.result,
                current.attempts,
            )
        why = "the lease was lost" if lease_epoch is not None and current.status == "prepared" else ""
        raise OperationStateConflict(
            f"operation {operation_id} is {current.status}; it cannot become {to_status}"
            + (f" ({why})" if why else ""),
            details={"status": current.status},
        )
    return op


# The outcomes a client may send again and get the same answer: final ones, the same in every part
# the operation keeps. ("started" is not: a second start must go through the lease check.)
_REPEATABLE = ("succeeded", "failed", "unknown")


def _same_outcome(current: ToolOperation, to_status: str, external_ref: str | None, result: Any) -> bool:
    if current.status != to_status or to_status not in _REPEATABLE:
        return False
    if to_status == "unknown":
        return True
    same_result = canonical_json(current.result) == canonical_json(result)
    return same_result and (to_status != "succeeded" or current.external_ref == external_ref)


@tenant_of_call
def operation_mark_started(
    *,
    tenant_id: UUID,
    operation_id: str,
    actor: str,
    run_id: UUID,
    lease_epoch: int,
    call_timeout_s: float | None = None,
) -> OperationRow:
    """Only the current lease holder of the acting run (a fork acts on its parent's operation) may
    start a side effect. `call_timeout_s` (default KEEPER_OPERATION_CALL_TIMEOUT): the longest the call
    may take; until then a lookup's "not applied" is not trusted."""
    timeout = settings.KEEPER_OPERATION_CALL_TIMEOUT if call_timeout_s is None else call_timeout_s
    return _move(
        tenant_id=tenant_id,
        operation_id=operation_id,
        to_status="started",
        actor=actor,
        lease_epoch=lease_epoch,
        acting_run_id=run_id,
        call_timeout=float(timeout),
    )


@tenant_of_call
def operation_mark_succeeded(
    *,
    tenant_id: UUID,
    operation_id: str,
    actor: str,
    external_ref: str,
    result: Any,
    note: str = "",
    late: bool = False,
) -> OperationRow:
    """`late`: reported by a worker that may have lost its lease (operation_statements.operation_transition)."""
    if not external_ref:
        raise InvalidInput("a succeeded operation needs the external reference", code="external_ref_required")
    return _move(
        tenant_id=tenant_id,
        operation_id=operation_id,
        to_status="succeeded",
        actor=actor,
        note=note,
        external_ref=external_ref,
        result=result,
        late=late,
    )


@tenant_of_call
def operation_mark_failed(
    *, tenant_id: UUID, operation_id: str, actor: str, result: Any, note: str = "", late: bool = False
) -> OperationRow:
    """A definite answer that the effect was refused (not a timeout: that is unknown)."""
    return _move(
        tenant_id=tenant_id,
        operation_id=operation_id,
        to_status="failed",
        actor=actor,
        note=note,
        result=result,
        late=late,
    )


@tenant_of_call
def operation_mark_unknown(
    *, tenant_id: UUID, operation_id: str, actor: str, note: str, call_ended: bool = False
) -> OperationRow:
    """Nobody knows whether it was applied. `call_ended`: the worker that sent it saw its call end (an
    error answer, its timeout): nothing of it is still in flight from this side, so a lookup's "not
    applied" is trusted from now on. A take-over that finds an operation started knows no such thing."""
    return _move(
        tenant_id=tenant_id,
        operation_id=operation_id,
        to_status="unknown",
        actor=actor,
        note=note,
        call_ended=call_ended,
    )


@tenant_of_call
def operation_mark_not_applied(
    *, tenant_id: UUID, operation_id: str, actor: str, note: str, by_person: bool = False
) -> OperationRow:
    """An authoritative answer says it never happened: the request may be sent once more. A lookup's
    answer is trusted only once the last start's call could have ended (OperationInFlight before);
    a person's reconciliation (`by_person`) is their own check of the outside system."""
    if not by_person:
        operation_in_flight_check(tenant_id=tenant_id, operation_id=operation_id)
    return _move(tenant_id=tenant_id, operation_id=operation_id, to_status="prepared", actor=actor, note=note)


def operation_in_flight_check(*, tenant_id: UUID, operation_id: str) -> None:
    """OperationInFlight while the operation's last call may still be on its way."""
    deadline = (
        ToolOperation.objects.filter(tenant_id=tenant_id, operation_id=operation_id)
        .values_list("call_deadline_at", flat=True)
        .first()
    )
    now = timezone.now()
    if deadline is not None and deadline > now:
        wait = (deadline - now).total_seconds()
        raise OperationInFlight(
            f"operation {operation_id} was started less than its call's timeout ago: a lookup's 'not applied' "
            f"may describe a request still in flight; ask again in {math.ceil(wait)} s",
            details={"retry_after": math.ceil(wait), "call_deadline_at": deadline.isoformat()},
        )


RECONCILE_OUTCOMES = ("applied", "not_applied")


@tenant_of_call
def operation_reconcile(
    *,
    tenant_id: UUID,
    operation_id: str,
    actor: str,
    note: str,
    outcome: str,
    external_ref: str | None = None,
    resume: bool = True,
) -> ToolOperation:
    """A person settles an operation whose outcome is unknown, and (by default) resumes its run if it
    is suspended (a finished run stays as it is: the settlement is recorded on it).

    `applied` marks it succeeded with the external reference they found; `not_applied` confirms
    it never happened and permits one more attempt. Both are written to the run's event log with
    the actor and the note, in the same transaction as the operation change.
    """
    if not visible_text(note):
        raise InvalidInput("reconciliation needs a note saying what was checked", code="note_required")
    if outcome not in RECONCILE_OUTCOMES:
        raise InvalidInput(f"outcome must be one of {', '.join(RECONCILE_OUTCOMES)}", code="invalid_outcome")
    if outcome == "applied" and not (external_ref or "").strip():
        raise InvalidInput("an applied operation needs its external reference", code="external_ref_required")
    op = ToolOperation.objects.filter(tenant_id=tenant_id, operation_id=operation_id).first()
    if op is None:
        raise NotFound(f"no operation {operation_id}", code="operation_not_found")
    if op.status not in statements.OPERATION_TRANSITIONS["succeeded"]:  # in doubt: started or unknown
        raise OperationStateConflict(
            f"operation {operation_id} is {op.status}: only an operation in doubt is reconciled",
            details={"status": op.status},
        )
    run = AgentRun.objects.get(run_id=op.run_id)
    if run.status == RunStatus.RUNNING:
        raise InvalidTransition(
            f"run {run.run_id} is running: its worker settles the operation; operations are reconciled on "
            "suspended or finished runs",
            details={"status": run.status},
        )
    if run.status != RunStatus.SUSPENDED or run.suspend_reason == SUBJECT_ERASED:
        # The money is settled all the same; a finished run, or one whose subject was erased, never
        # continues. (A run cancelled or completed with an operation in doubt would otherwise keep it
        # in doubt for ever, and its subject's erasure could never be clean.)
        resume = False
    with transaction.atomic():
        if outcome == "applied":
            operation_mark_succeeded(
                tenant_id=tenant_id,
                operation_id=operation_id,
                actor=actor,
                note=note,
                external_ref=external_ref or "",
                result={"reconciled_by": actor},
            )
        else:
            operation_mark_not_applied(
                tenant_id=tenant_id, operation_id=operation_id, actor=actor, note=note, by_person=True
            )
        payload = {
            "operation_id": operation_id,
            "outcome": outcome,
            "external_ref": external_ref,
            "note": note,
        }
        seq = apply(
            m.StatusChanged(
                run_id=run.run_id,
                tenant_id=run.tenant_id,
                from_statuses=(run.status,),
                to_status=run.status,
                event_type="operation_reconciled",
                actor=actor,
                payload=payload,
                expected_revision=run.state_revision,
                request_resume=resume,
            )
        )
        if seq is None:
            raise InvalidTransition(
                f"run {run.run_id} changed while reconciling (a worker, a person or an erasure acted); "
                "nothing was written: look at the run and try again"
            )
        if resume:
            run_enqueue_on_commit(run_id=run.run_id)
    op.refresh_from_db()
    return op
