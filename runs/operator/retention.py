"""Retention: purge finished runs (and their events, operations, approvals, summaries) and old
retrieval snapshots by a policy, in batches, tenant by tenant. The purge command only parses and prints.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone
from redis.exceptions import RedisError

from core.errors import Conflict, InvalidInput
from core.models import Tenant
from core.tenancy import tenant_of_call, tenant_scope
from retrieval.models import RetrievalSnapshot
from runs.conversations.sessions import redis_client, session_key_of
from runs.engine.forks import forks_expire
from runs.kernel import apply
from runs.kernel import moves as m
from runs.kernel.models import (
    TERMINAL_RUN_STATUSES,
    AgentEvent,
    AgentRun,
    Approval,
    OperationStatus,
    RunStatus,
    Summary,
    ToolOperation,
)
from runs.operator.stuck import run_tenant_ids

logger = logging.getLogger(__name__)

PURGE_BATCH = 1000


@dataclass
class PurgeReport:
    dry_run: bool
    runs: int = 0
    events: int = 0
    operations: int = 0
    approvals: int = 0
    summaries: int = 0
    snapshots: int = 0
    forks_expired: int = 0
    kept_open_operations: int = 0  # finished runs kept: an operation still started/unknown
    batches: int = 0
    session_windows: int = 0  # the deleted runs' Redis windows (a message's text lives there too)

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _windows_delete(rows: list[tuple[UUID, UUID, str]]) -> int:
    keys = [
        session_key_of(tenant_id=tenant, subject=subject, run_id=run_id) for run_id, tenant, subject in rows
    ]
    try:
        return int(redis_client().delete(*keys))
    except RedisError as exc:  # the runs are gone; their windows expire on their own (7 days)
        logger.warning("purge: Redis windows of %s runs not deleted: %s", len(keys), exc)
        return 0


def purge_statuses(raw: str) -> list[str]:
    statuses = [s.strip() for s in raw.split(",") if s.strip()]
    wrong = [s for s in statuses if s not in TERMINAL_RUN_STATUSES]
    if not statuses or wrong:
        raise InvalidInput(
            f"--status takes finished statuses only ({', '.join(sorted(TERMINAL_RUN_STATUSES))}), not {', '.join(wrong) or 'nothing'}",
            code="invalid_status",
        )
    return statuses


def _purgeable(
    *, older_than_days: float, statuses: Sequence[str], tenant_id: UUID | None, forks_only: bool = False
) -> Any:
    """Finished runs past the policy that nothing still needs (forks_only: forks only).

    Left out: runs with forks (a fork's operations live on its parent, and parent_run is PROTECT;
    the parent goes once its forks are gone) and runs with an operation still `started`/`unknown`
    (its effect may have happened: a person reconciles it first).
    """
    cutoff = timezone.now() - timedelta(days=older_than_days)
    runs = AgentRun.objects.filter(status__in=list(statuses), updated_at__lt=cutoff)
    if tenant_id is not None:
        runs = runs.filter(tenant_id=tenant_id)
    if forks_only:
        runs = runs.filter(parent_run_id__isnull=False)
    return runs.exclude(Exists(AgentRun.objects.filter(parent_run_id=OuterRef("run_id")))).exclude(
        Exists(
            ToolOperation.objects.filter(
                run_id=OuterRef("run_id"), status__in=[OperationStatus.STARTED, OperationStatus.UNKNOWN]
            )
        )
    )


@tenant_of_call
def runs_purge(
    *,
    older_than_days: float,
    statuses: Sequence[str],
    tenant_id: UUID | None = None,
    snapshots_older_than_days: float | None = None,
    dry_run: bool = False,
    batch_size: int = PURGE_BATCH,
    progress: Callable[[str], None] = lambda line: None,
    forks_only: bool = False,
) -> PurgeReport:
    """Delete finished runs past the retention policy in batches (one transaction each), then old
    retrieval snapshots (in each tenant's scope), then expire orphan forks. Never an active run.
    forks_only: only forks (runs with a parent), as the beat's forks_purge asks."""
    if older_than_days < 0 or (snapshots_older_than_days is not None and snapshots_older_than_days < 0):
        raise InvalidInput("ages must be zero or more days", code="invalid_age")
    statuses = [s for s in statuses if s in TERMINAL_RUN_STATUSES]  # the active ones never
    report = PurgeReport(dry_run=dry_run)
    if tenant_id is None:  # tenant by tenant (row-level security), then the global parts below
        for each in run_tenant_ids():
            part = runs_purge(
                older_than_days=older_than_days,
                statuses=statuses,
                tenant_id=each,
                dry_run=dry_run,
                batch_size=batch_size,
                progress=progress,
                forks_only=forks_only,
            )
            for name, value in part.as_json().items():
                if name != "dry_run":
                    setattr(report, name, getattr(report, name) + value)
        return _purge_global(
            report,
            snapshots_older_than_days=snapshots_older_than_days,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
        )
    candidates = _purgeable(
        older_than_days=older_than_days, statuses=statuses, tenant_id=tenant_id, forks_only=forks_only
    )
    cutoff = timezone.now() - timedelta(days=older_than_days)
    kept = AgentRun.objects.filter(status__in=statuses, updated_at__lt=cutoff)
    if forks_only:
        kept = kept.filter(parent_run_id__isnull=False)
    kept = kept.filter(
        Exists(
            ToolOperation.objects.filter(
                run_id=OuterRef("run_id"), status__in=[OperationStatus.STARTED, OperationStatus.UNKNOWN]
            )
        )
    )
    report.kept_open_operations = (kept.filter(tenant_id=tenant_id) if tenant_id else kept).count()
    if dry_run:
        ids = candidates.values("run_id")
        report.runs = candidates.count()
        report.events = AgentEvent.objects.filter(run_id__in=ids).count()
        report.operations = ToolOperation.objects.filter(run_id__in=ids).count()
        report.approvals = Approval.objects.filter(run_id__in=ids).count()
        report.summaries = Summary.objects.filter(run_id__in=ids).count()
    else:
        while True:
            try:
                with transaction.atomic():
                    rows = list(
                        candidates.order_by("updated_at").values_list("run_id", "tenant_id", "subject")[
                            :batch_size
                        ]
                    )
                    if not rows:
                        break
                    batch = tuple(run_id for run_id, _, _ in rows)
                    per_model = apply(m.RunsPurged(batch, tuple(statuses)))
                    operations = per_model.get("runs.ToolOperation", 0)
            except IntegrityError:  # a fork of one of them was created meanwhile (parent_run is PROTECT)
                raise Conflict(
                    f"a run of batch {report.batches + 1} gained a fork while purging; that batch was rolled back "
                    f"({report.runs} runs deleted before it): run purge again",
                    code="purge_conflict",
                ) from None
            report.batches += 1
            # A purged run's window (its last messages, for 7 days) would stay in Redis, where an erasure
            # of a subject named in it never looks (the run is gone).
            report.session_windows += _windows_delete(rows)
            report.operations += operations
            report.runs += per_model.get("runs.AgentRun", 0)
            report.events += per_model.get("runs.AgentEvent", 0)
            report.approvals += per_model.get("runs.Approval", 0)
            report.summaries += per_model.get("runs.Summary", 0)
            progress(
                f"batch {report.batches}: {per_model.get('runs.AgentRun', 0)} runs deleted ({report.runs} so far)"
            )
    if snapshots_older_than_days is not None:
        report.snapshots = snapshots_purge(
            older_than_days=snapshots_older_than_days,
            tenant_id=tenant_id,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
        )
    return report


def _purge_global(
    report: PurgeReport,
    *,
    snapshots_older_than_days: float | None,
    dry_run: bool,
    batch_size: int,
    progress: Callable[[str], None],
) -> PurgeReport:
    if snapshots_older_than_days is not None:
        report.snapshots = snapshots_purge(
            older_than_days=snapshots_older_than_days,
            tenant_id=None,
            dry_run=dry_run,
            batch_size=batch_size,
            progress=progress,
        )
    # forks_expire is global; with a tenant filter it is left for the beat
    if dry_run:
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM keeper_forks_expired()")
            report.forks_expired = cursor.fetchone()[0]
    else:
        report.forks_expired = forks_expire()
    return report


def forks_purge() -> PurgeReport:
    """The beat's retention of abandoned branches: a fork cancelled or expired (forks_expire) keeps
    its events, the conversation it copied and its summaries for KEEPER_FORK_TTL after it ended, to
    be looked at; then they go with it. A fork with forks of its own, or with an operation still
    started or unknown, stays until those are gone or reconciled (as in any purge)."""
    return runs_purge(
        older_than_days=settings.KEEPER_FORK_TTL / 86400,
        statuses=[RunStatus.CANCELLED],
        forks_only=True,
    )


@tenant_of_call
def snapshots_purge(
    *,
    older_than_days: float,
    tenant_id: UUID | None,
    dry_run: bool,
    batch_size: int = PURGE_BATCH,
    progress: Callable[[str], None] = lambda line: None,
) -> int:
    """Delete retrieval snapshots older than the policy, tenant by tenant (row-level security)."""
    cutoff = timezone.now() - timedelta(days=older_than_days)
    tenants = Tenant.objects.filter(tenant_id=tenant_id) if tenant_id else Tenant.objects.all()
    total = 0
    for tenant in tenants.order_by("slug"):
        while True:
            with tenant_scope(tenant.tenant_id):
                old = RetrievalSnapshot.objects.filter(created_at__lt=cutoff)
                if dry_run:
                    total += old.count()
                    break
                batch = list(old.order_by("created_at").values_list("snapshot_id", flat=True)[:batch_size])
                deleted = RetrievalSnapshot.objects.filter(snapshot_id__in=batch).delete()[0] if batch else 0
            if not batch:
                break
            total += deleted
            progress(f"snapshots of {tenant.slug}: {deleted} deleted ({total} so far)")
    return total
