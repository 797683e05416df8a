"""Reads of approvals and tool operations, and of what waits for a person (the support inbox):
pending approvals, operations in doubt, runs whose resume was refused, other suspended runs."""

from __future__ import annotations

from datetime import datetime
from functools import reduce
from operator import or_
from uuid import UUID

from django.db.models import Exists, OuterRef, Q, QuerySet

from core.errors import NotFound
from core.pagination import KeysetPage, keyset_page
from core.tenancy import tenant_bound, tenant_of_call
from runs.engine.registry import registry
from runs.kernel.models import (
    SUBJECT_ERASED,
    TERMINAL_RUN_STATUSES,
    AgentEvent,
    AgentRun,
    Approval,
    ApprovalStatus,
    OperationStatus,
    RunStatus,
    ToolOperation,
)

RECONCILIATION_REQUIRED = "reconciliation_required"


APPROVAL_KEYS = ("created_at", "approval_id")


def approval_list(*, status: str | None = None, run_id: UUID | None = None) -> QuerySet[Approval]:
    approvals = Approval.objects.select_related("tenant").order_by("-created_at", "-approval_id")
    if run_id is not None:
        approvals = approvals.filter(run_id=run_id)
    return approvals.filter(status=status) if status else approvals


def approval_page(
    *, approvals: QuerySet[Approval], cursor: tuple[datetime, UUID] | None, limit: int
) -> KeysetPage[Approval]:
    """One keyset page of `approvals`, newest first by creation (a key that never changes: a walk
    sees each approval once)."""
    return keyset_page(approvals, keys=APPROVAL_KEYS, cursor=cursor, limit=limit)


def approval_get_for_tenants(*, tenant_ids: list[UUID], approval_id: UUID) -> Approval | None:
    return (
        Approval.objects.select_related("run", "tenant")
        .filter(approval_id=approval_id, tenant_id__in=tenant_ids)
        .first()
    )


def approval_run_list(*, run: AgentRun, limit: int = 20) -> list[Approval]:
    """The run's newest approvals."""
    return list(
        Approval.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id).order_by("-created_at")[:limit]
    )


def _pending(tenant_ids: list[UUID]) -> QuerySet[Approval]:
    return Approval.objects.select_related("run", "tenant").filter(
        tenant_id__in=tenant_ids, status=ApprovalStatus.PENDING
    )


def approval_pending_list(
    *, tenant_ids: list[UUID], run_id: UUID | None = None, limit: int | None = None
) -> list[Approval]:
    """Pending approvals (of one run with `run_id`), the soonest to expire first."""
    approvals = _pending(tenant_ids)
    if run_id is not None:
        approvals = approvals.filter(run_id=run_id)
    return list(approvals.order_by("expires_at")[:limit])


def approval_closed_by_erasure_list(*, tenant_ids: list[UUID], since: datetime, limit: int) -> list[Approval]:
    """Approvals that were waiting when their run's subject was erased (Keeper closed them, as
    expired), closed since `since`, newest first."""
    return list(
        Approval.objects.select_related("run", "tenant")
        .filter(
            tenant_id__in=tenant_ids,
            status=ApprovalStatus.EXPIRED,
            decided_by="keeper",
            decided_at__gte=since,
            run__tenant_id__in=tenant_ids,
            run__suspend_reason=SUBJECT_ERASED,
        )
        .order_by("-decided_at")[:limit]
    )


def approval_pending_for_runs(*, tenant_id: UUID, run_ids: list[UUID]) -> list[Approval]:
    """The pending approvals of these runs of one tenant, the soonest to expire first."""
    return list(_pending([tenant_id]).filter(run_id__in=run_ids).order_by("expires_at"))


def approval_pending_count(*, tenant_ids: list[UUID]) -> int:
    return _pending(tenant_ids).count()


def operation_get(*, pk: int) -> ToolOperation:
    op = ToolOperation.objects.filter(pk=pk).first()
    if op is None:
        raise NotFound(f"no operation {pk}", code="operation_not_found")
    return op


def operation_get_for_tenants(*, tenant_ids: list[UUID], pk: int) -> ToolOperation | None:
    return (
        ToolOperation.objects.select_related("run", "tenant").filter(pk=pk, tenant_id__in=tenant_ids).first()
    )


@tenant_of_call
def operation_find(*, tenant_id: UUID, operation_id: str) -> ToolOperation | None:
    return ToolOperation.objects.filter(tenant_id=tenant_id, operation_id=operation_id).first()


@tenant_of_call
def run_operations(*, run_id: UUID) -> QuerySet[ToolOperation]:
    return ToolOperation.objects.filter(tenant_id=tenant_bound(), run_id=run_id).order_by("created_at")


def operation_run_list(*, run: AgentRun, limit: int = 100) -> list[ToolOperation]:
    """The run's operations in the order they began (the caller checked the run's tenant)."""
    operations = ToolOperation.objects.filter(tenant_id=run.tenant_id, run_id=run.run_id)
    return list(operations.order_by("created_at")[:limit])


def _in_doubt() -> QuerySet[ToolOperation]:
    """Unknown operations of active runs, started ones whose run waits for reconciliation (or whose
    subject was erased: it never continues, and its worker may no longer report), and both
    on finished runs (cancelled, or completed by an outside worker, with the outcome never learned)."""
    return ToolOperation.objects.select_related("run", "tenant").filter(
        Q(status=OperationStatus.UNKNOWN, run__status__in=[RunStatus.RUNNING, RunStatus.SUSPENDED])
        | Q(
            status=OperationStatus.STARTED,
            run__status=RunStatus.SUSPENDED,
            run__suspend_reason__in=[RECONCILIATION_REQUIRED, SUBJECT_ERASED],
        )
        | Q(
            status__in=[OperationStatus.STARTED, OperationStatus.UNKNOWN],
            run__status__in=sorted(TERMINAL_RUN_STATUSES),
        )
    )


def operation_in_doubt_list(*, tenant_ids: list[UUID], limit: int) -> list[ToolOperation]:
    """Operations in doubt, the longest waiting first."""
    return list(_in_doubt().filter(tenant_id__in=tenant_ids).order_by("updated_at")[:limit])


def operation_in_doubt_count(*, tenant_ids: list[UUID]) -> int:
    return _in_doubt().filter(tenant_id__in=tenant_ids).count()


def run_operations_in_doubt(*, run: AgentRun) -> list[ToolOperation]:
    return list(_in_doubt().filter(tenant_id=run.tenant_id, run_id=run.run_id).order_by("created_at"))


def _suspended(tenant_ids: list[UUID]) -> QuerySet[AgentRun]:
    """Suspended runs, without those of workflows driven from outside (their own process, not a
    person here, continues them; a LangGraph thread's questions are listed apart)."""
    return (
        AgentRun.objects.select_related("tenant")
        .filter(tenant_id__in=tenant_ids, status=RunStatus.SUSPENDED)
        .exclude(workflow_name__in=registry.outside_names())
    )


def _refused_now() -> Exists:
    """The run's latest event is a refused resume."""
    return Exists(
        AgentEvent.objects.filter(
            run_id=OuterRef("run_id"), seq=OuterRef("state_revision"), event_type="resume_refused"
        )
    )


def _refused(tenant_ids: list[UUID]) -> QuerySet[AgentRun]:
    return _suspended(tenant_ids).filter(_refused_now()).exclude(suspend_reason=RECONCILIATION_REQUIRED)


def run_refused_count(*, tenant_ids: list[UUID]) -> int:
    return _refused(tenant_ids).count()


def run_refused_list(*, tenant_ids: list[UUID], limit: int) -> list[tuple[AgentRun, AgentEvent]]:
    """Suspended runs whose latest event is a refused resume (not those waiting for reconciliation),
    the longest waiting first, each with that event."""
    runs = list(_refused(tenant_ids).order_by("updated_at")[:limit])
    if not runs:
        return []
    events = AgentEvent.objects.filter(reduce(or_, (Q(run_id=r.run_id, seq=r.state_revision) for r in runs)))
    by_run = {e.run_id: e for e in events}
    return [(r, by_run[r.run_id]) for r in runs if r.run_id in by_run]


def _waiting_otherwise(tenant_ids: list[UUID], reasons_excluded: tuple[str, ...]) -> QuerySet[AgentRun]:
    """Suspended runs that no other list holds: no pending approval, no operation in doubt, not
    refused at resume (whether or not those lists show them all), not suspended for `reasons_excluded`:
    runs waiting for an approval past the first 100 are not "other"."""
    pending = Approval.objects.filter(run_id=OuterRef("run_id"), status=ApprovalStatus.PENDING)
    doubt = _in_doubt().filter(run_id=OuterRef("run_id"))
    return (
        _suspended(tenant_ids)
        .exclude(suspend_reason__in=reasons_excluded)
        .exclude(Exists(pending))
        .exclude(Exists(doubt))
        .exclude(Q(_refused_now()) & ~Q(suspend_reason=RECONCILIATION_REQUIRED))
    )


def run_suspended_list(
    *, tenant_ids: list[UUID], limit: int, reasons_excluded: tuple[str, ...] = ()
) -> list[AgentRun]:
    """Suspended runs that wait for a person for another reason than the inbox's other lists, the
    longest waiting first."""
    return list(_waiting_otherwise(tenant_ids, reasons_excluded).order_by("updated_at")[:limit])


def run_suspended_count(*, tenant_ids: list[UUID], reasons_excluded: tuple[str, ...] = ()) -> int:
    return _waiting_otherwise(tenant_ids, reasons_excluded).count()
