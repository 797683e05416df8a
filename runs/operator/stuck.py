"""Stuck runs: runs that should be moving but are not (lost wake-ups, expired leases, unverified
resume requests, operations in doubt). The stuck_runs and redispatch commands print them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import connection
from django.db.models import Q
from django.utils import timezone

from core.errors import InvalidInput
from core.tenancy import tenant_of_call
from runs.kernel.models import (
    AgentRun,
    OperationStatus,
    RunStatus,
    ToolOperation,
)

# A run unchanged this long while it should move counts as stuck (the sweep resends every few seconds).
STUCK_AFTER_SECONDS = 300.0


# --- stuck runs -------------------------------------------------------------------------------


@dataclass
class StuckRun:
    run_id: UUID
    tenant: str
    workflow: str
    status: str
    next_step: str | None
    lease_owner: str | None
    lease_expires_at: datetime | None
    age_seconds: float  # since the run last changed
    reasons: list[str] = field(default_factory=list)
    # True when a wake-up can move it (running, or suspended with a resume request).
    dispatchable: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "run_id": str(self.run_id),
            "tenant": self.tenant,
            "workflow": self.workflow,
            "status": self.status,
            "next_step": self.next_step,
            "lease_owner": self.lease_owner,
            "lease_expires_at": self.lease_expires_at.isoformat() if self.lease_expires_at else None,
            "age_seconds": round(self.age_seconds, 1),
            "reasons": self.reasons,
            "dispatchable": self.dispatchable,
        }


def run_tenant_ids() -> list[UUID]:
    """Every tenant that has runs, through the narrow function (ids only): cross-tenant operator
    work is done tenant by tenant, each in its own row-level security scope."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT tenant_id FROM keeper_run_tenants() ORDER BY 1")
        return [row[0] for row in cursor.fetchall()]


def _ago(now: datetime, then: datetime) -> str:
    return f"{int((now - then).total_seconds())}s ago"


@tenant_of_call
def runs_stuck(*, older_than: float, tenant_id: UUID | None = None) -> list[StuckRun]:
    """Runs that should be moving and have not for `older_than` seconds, oldest first, with why.

    - running, nobody holds it (no lease, or the lease expired), due (wake_at passed) and unchanged
      for `older_than`: the wake-ups are lost or no worker takes them;
    - suspended with a resume request nobody verified for `older_than`;
    - an operation `unknown` (always: a person must reconcile it) or `started` for `older_than`.
    Imported runs (fenced on purpose) are left out.
    """
    if older_than < 0:
        raise InvalidInput("--older-than must be zero or more seconds", code="invalid_age")
    if tenant_id is None:
        every = [s for t in run_tenant_ids() for s in runs_stuck(older_than=older_than, tenant_id=t)]
        return sorted(every, key=lambda s: -s.age_seconds)
    now = timezone.now()
    cutoff = now - timedelta(seconds=older_than)
    runs = AgentRun.objects.select_related("tenant").filter(imported=False)
    if tenant_id is not None:
        runs = runs.filter(tenant_id=tenant_id)
    unheld = Q(lease_owner__isnull=True) | Q(lease_expires_at__lt=now)
    due = Q(wake_at__isnull=True) | Q(wake_at__lte=now)
    found: dict[UUID, StuckRun] = {}

    def entry(run: AgentRun) -> StuckRun:
        if run.run_id not in found:
            found[run.run_id] = StuckRun(
                run_id=run.run_id,
                tenant=run.tenant.slug,
                workflow=f"{run.workflow_name} v{run.workflow_version}",
                status=run.status,
                next_step=run.next_step,
                lease_owner=run.lease_owner,
                lease_expires_at=run.lease_expires_at,
                age_seconds=(now - run.updated_at).total_seconds(),
            )
        return found[run.run_id]

    for run in runs.filter(unheld, due, status=RunStatus.RUNNING, updated_at__lt=cutoff):
        stuck = entry(run)
        stuck.dispatchable = True
        if run.lease_owner is not None and run.lease_expires_at is not None:
            stuck.reasons.append(f"lease of {run.lease_owner} expired {_ago(now, run.lease_expires_at)}")
        elif run.wake_at is not None:
            stuck.reasons.append(f"wake_at passed {_ago(now, run.wake_at)}, nobody took it")
        elif run.dispatched_at is None:
            stuck.reasons.append("no lease and never re-dispatched")
        else:
            stuck.reasons.append(f"no lease; last wake-up sent {_ago(now, run.dispatched_at)}")
    for run in runs.filter(status=RunStatus.SUSPENDED, resume_requested_at__lt=cutoff):
        stuck = entry(run)
        stuck.dispatchable = True
        assert run.resume_requested_at is not None  # resume_requested_at__lt=cutoff
        stuck.reasons.append(
            f"resume requested by {run.resume_requested_by or '?'} {_ago(now, run.resume_requested_at)}"
            ", not verified"
        )
    ops = ToolOperation.objects.filter(
        Q(status=OperationStatus.UNKNOWN) | Q(status=OperationStatus.STARTED, updated_at__lt=cutoff),
        run__in=runs,
    ).order_by("updated_at")
    by_run = {run.run_id: run for run in runs.filter(run_id__in=ops.values("run_id"))}
    for op in ops:
        entry(by_run[op.run_id]).reasons.append(
            f"operation {op.operation_id} {op.status} since {_ago(now, op.updated_at)}"
        )
    return sorted(found.values(), key=lambda s: -s.age_seconds)
