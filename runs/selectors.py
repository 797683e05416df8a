"""Reads of runs and their history."""

from __future__ import annotations

from uuid import UUID

from django.db.models import QuerySet

from core.errors import NotFound
from runs.errors import RunNotFound
from runs.models import AgentEvent, AgentRun, Approval, ToolOperation


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


def run_events(*, run_id: UUID, after_seq: int = 0, limit: int = 100) -> list[AgentEvent]:
    return list(AgentEvent.objects.filter(run_id=run_id, seq__gt=after_seq).order_by("seq")[:limit])


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


def operation_find(*, tenant_id: UUID, operation_id: str) -> ToolOperation | None:
    return ToolOperation.objects.filter(tenant_id=tenant_id, operation_id=operation_id).first()
