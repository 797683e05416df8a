"""Reads for queue health: runs by status, the oldest runnable run, expired leases and who holds
leases now, for a set of tenants (counts capped, lists short)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from django.db.models import Count, Max, Q

from runs.engine.selectors.runs import run_count_capped
from runs.kernel.models import AgentEvent, AgentRun, RunStatus

# Only what the queue panel shows of a run.
QUEUE_FIELDS = (
    "run_id",
    "tenant_id",
    "workflow_name",
    "status",
    "next_step",
    "lease_owner",
    "lease_expires_at",
    "lease_epoch",
    "updated_at",
)


@dataclass(frozen=True)
class QueueHealth:
    counts: dict[str, int]  # runs per status
    oldest_runnable: AgentRun | None
    runnable: int  # runnable runs, counted up to cap + 1
    expired: list[AgentRun]  # the oldest 20 active runs whose lease expired
    expired_count: int  # counted up to cap + 1
    holders: list[dict[str, object]]  # lease_owner, held, until: who holds leases now


def run_queue_health(*, tenant_ids: list[UUID], now: datetime, cap: int) -> QueueHealth:
    runs = AgentRun.objects.filter(tenant_id__in=tenant_ids)
    counts = dict(runs.order_by().values_list("status").annotate(n=Count("run_id")))
    runnable = runs.filter(status=RunStatus.RUNNING).filter(
        Q(lease_owner__isnull=True) | Q(lease_expires_at__lt=now),
        Q(wake_at__isnull=True) | Q(wake_at__lte=now),
    )
    expired = runs.filter(
        status__in=[RunStatus.RUNNING, RunStatus.SUSPENDED],
        lease_owner__isnull=False,
        lease_expires_at__lt=now,
    )
    holders = (
        runs.filter(lease_owner__isnull=False, lease_expires_at__gte=now)
        .values("lease_owner")
        .annotate(held=Count("run_id"), until=Max("lease_expires_at"))
        .order_by("lease_owner")[:50]
    )
    return QueueHealth(
        counts=counts,
        oldest_runnable=runnable.only(*QUEUE_FIELDS).order_by("updated_at").first(),
        runnable=run_count_capped(runs=runnable, cap=cap),
        expired=list(expired.only(*QUEUE_FIELDS).order_by("lease_expires_at")[:20]),
        expired_count=run_count_capped(runs=expired, cap=cap),
        holders=[dict(row) for row in holders],
    )


# A step's outcome events: what a worker did when it ran a step of a run.
WORKER_EVENT_TYPES = (
    "step_completed",
    "step_error",
    "run_suspended",
    "run_completed",
    "run_failed",
    "assistant_message",
    "resume_verified",
    "resume_refused",
)


def worker_recent_steps(
    *, tenant_ids: list[UUID], actors: list[str], since: datetime, limit: int
) -> list[AgentEvent]:
    """What these worker processes (by their event actor, host:pid) committed since `since` in the
    user's tenants, newest first, with each event's run. A process of a thread pool (the default)
    names itself host:pid:thread on the events its threads write, so the pid matches both forms."""
    if not actors:
        return []
    by_process = Q()
    for actor in actors:
        by_process |= Q(actor=actor) | Q(actor__startswith=f"{actor}:")
    return list(
        AgentEvent.objects.select_related("run")
        .filter(
            by_process,
            tenant_id__in=tenant_ids,
            created_at__gte=since,
            event_type__in=WORKER_EVENT_TYPES,
        )
        .defer("state", "run__state", "run__result")
        .order_by("-created_at")[:limit]
    )
