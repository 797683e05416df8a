"""Reads of LangGraph threads for the console: the threads waiting for a person's answer."""

from __future__ import annotations

from uuid import UUID

from runs.engine.models import AgentRun, RunStatus
from runs.langgraph.store import INTERRUPT_REASON, WORKFLOW


def thread_interrupted_list(*, tenant_ids: list[UUID], limit: int) -> list[AgentRun]:
    """Threads of these tenants stopped at an interrupt(), the longest waiting first (the question is
    the run's suspend detail)."""
    return list(
        AgentRun.objects.select_related("tenant")
        .filter(
            tenant_id__in=tenant_ids,
            status=RunStatus.SUSPENDED,
            workflow_name=WORKFLOW,
            suspend_reason=INTERRUPT_REASON,
        )
        .order_by("updated_at")[:limit]
    )
