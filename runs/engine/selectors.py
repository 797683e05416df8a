"""Reads of runs and their history."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.db.models import Q, QuerySet

from core.errors import NotFound
from core.models import Tenant
from core.tenancy import tenant_of_call
from runs.engine.errors import RunNotFound
from runs.engine.models import AgentEvent, AgentRun, Approval, ToolOperation


@tenant_of_call
def run_get(*, run_id: UUID) -> AgentRun:
    run = AgentRun.objects.select_related("tenant").filter(run_id=run_id).first()
    if run is None:
        raise RunNotFound(f"no run {run_id}")
    return run


def run_list(*, status: str | None = None, workflow_name: str | None = None) -> QuerySet[AgentRun]:
    runs = AgentRun.objects.select_related("tenant").order_by("-created_at")
    if status:
        runs = runs.filter(status=status)
    if workflow_name:
        runs = runs.filter(workflow_name=workflow_name)
    return runs


@tenant_of_call
def run_events(*, run_id: UUID, after_seq: int = 0, limit: int = 100) -> list[AgentEvent]:
    return list(AgentEvent.objects.filter(run_id=run_id, seq__gt=after_seq).order_by("seq")[:limit])


@tenant_of_call
def run_operations(*, run_id: UUID) -> QuerySet[ToolOperation]:
    return ToolOperation.objects.filter(run_id=run_id).order_by("created_at")


def approval_list(*, status: str | None = None) -> QuerySet[Approval]:
    approvals = Approval.objects.select_related("tenant").order_by("-created_at")
    return approvals.filter(status=status) if status else approvals


def operation_get(*, pk: int) -> ToolOperation:
    op = ToolOperation.objects.filter(pk=pk).first()
    if op is None:
        raise NotFound(f"no operation {pk}", code="operation_not_found")
    return op


@tenant_of_call
def operation_find(*, tenant_id: UUID, operation_id: str) -> ToolOperation | None:
    return ToolOperation.objects.filter(tenant_id=tenant_id, operation_id=operation_id).first()


@tenant_of_call
def run_page(
    *,
    tenant: Tenant | None,
    cursor: tuple[Any, Any] | None,
    limit: int,
    status: str | None = None,
    workflow: str | None = None,
    subject: str | None = None,
    idempotency_key: str | None = None,
) -> list[AgentRun]:
    """One keyset page of a tenant's runs (every tenant's with `tenant=None`: staff only), newest
    activity first, plus one row to tell if more follow (no OFFSET, no COUNT)."""
    runs = AgentRun.objects.select_related("tenant")
    if tenant is not None:
        runs = runs.filter(tenant=tenant)
    for field, value in (
        ("status", status),
        ("workflow_name", workflow),
        ("subject", subject),
        ("idempotency_key", idempotency_key),
    ):
        if value is not None:
            runs = runs.filter(**{field: value})
    if cursor is not None:
        at, run_id = cursor
        runs = runs.filter(Q(updated_at__lt=at) | Q(updated_at=at, run_id__lt=run_id))
    return list(runs.order_by("-updated_at", "-run_id")[: limit + 1])
