"""Reads of LangGraph threads for the console: the threads waiting for a person's answer."""

from __future__ import annotations

from uuid import UUID

from django.db.models import QuerySet

from runs.kernel.models import AgentRun, RunStatus
from runs.langgraph.store import INTERRUPT_REASON, WORKFLOW


def _interrupted(tenant_ids: list[UUID]) -> QuerySet[AgentRun]:
    return AgentRun.objects.select_related("tenant").filter(
        tenant_id__in=tenant_ids,
        status=RunStatus.SUSPENDED,
        workflow_name=WORKFLOW,
        suspend_reason=INTERRUPT_REASON,
    )


def thread_interrupted_list(*, tenant_ids: list[UUID], limit: int) -> list[AgentRun]:
    """Threads of these tenants stopped at an interrupt(), the longest waiting first (the question is
    the run's suspend detail)."""
    return list(_interrupted(tenant_ids).order_by("updated_at")[:limit])


def thread_interrupted_count(*, tenant_ids: list[UUID]) -> int:
    return _interrupted(tenant_ids).count()
