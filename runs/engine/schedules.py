"""Schedules: a tenant's workflow started on a cron expression or every N seconds, once per slot.

The beat's sweep (schedules_fire) claims due schedules with FOR UPDATE SKIP LOCKED, starts one run per
slot with the idempotency key `schedule:<id>:<slot>` and advances `next_fire_at` in the same
transaction, so two beats (or two workers running the sweep at once) start exactly one run per slot.
After downtime only the latest missed slot fires, once; the slots before it are passed over.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core.errors import ApplicationError, InvalidInput, NotFound
from core.models import Tenant
from core.tenancy import tenant_bind, tenant_of_call
from runs.engine.cron import cron_parse
from runs.engine.registry import registry
from runs.engine.runs import run_input_check, run_start
from runs.engine.schedule_models import OverlapPolicy, WorkflowSchedule
from runs.kernel.models import ACTIVE_RUN_STATUSES, AgentRun

logger = logging.getLogger(__name__)

# An interval this short would start a run on every beat tick; a year is the longest.
MAX_INTERVAL_SECONDS = 366 * 24 * 3600


@dataclass(frozen=True)
class Timing:
    cron: str
    interval_seconds: int | None


class ScheduleQuotaExceeded(InvalidInput):
    code = "schedule_quota_exceeded"


def _timing(*, cron: str | None, interval_seconds: Any) -> Timing:
    cron = (cron or "").strip()
    if cron and interval_seconds is not None:
        raise InvalidInput(
            "a schedule has a cron expression or an interval, not both", code="invalid_schedule"
        )
    if cron:
        return Timing(cron=cron_parse(cron).expression, interval_seconds=None)
    if interval_seconds is None:
        raise InvalidInput(
            "a schedule needs a cron expression or an interval in seconds", code="invalid_schedule"
        )
    if isinstance(interval_seconds, bool) or not isinstance(interval_seconds, int):
        raise InvalidInput("interval_seconds must be a whole number of seconds", code="invalid_interval")
    shortest = settings.KEEPER_SCHEDULE_MIN_INTERVAL
    if not shortest <= interval_seconds <= MAX_INTERVAL_SECONDS:
        raise InvalidInput(
            f"interval_seconds must be between {shortest} (KEEPER_SCHEDULE_MIN_INTERVAL) and "
            f"{MAX_INTERVAL_SECONDS}, not {interval_seconds}",
            code="invalid_interval",
            details={"minimum": shortest, "maximum": MAX_INTERVAL_SECONDS},
        )
    return Timing(cron="", interval_seconds=interval_seconds)


def _first_slot(timing: Timing, now: datetime) -> datetime:
    if timing.cron:
        return cron_parse(timing.cron).next_after(now)
    assert timing.interval_seconds is not None
    # Whole seconds, like the slot in the run's idempotency key.
    return now.replace(microsecond=0) + timedelta(seconds=timing.interval_seconds)


def _check_run_request(*, workflow_name: str, input: Any) -> None:
    """What run_start would refuse, refused when the schedule is written (nothing is stored)."""
    how = registry.outside(workflow_name)
    if how is not None:
        raise InvalidInput(
            f"workflow {workflow_name!r} is driven by its own process and cannot be scheduled here; {how}",
            code="workflow_not_schedulable",
        )
    workflow = registry.get(workflow_name)  # UnknownWorkflow (422) names the registered ones
    if not isinstance(input, dict):
        raise InvalidInput(f"input must be a JSON object, not {type(input).__name__}", code="invalid_input")
    run_input_check(workflow, input)  # its budgets too: with steps -1, every slot would fail


def _overlap(value: str) -> str:
    if value not in OverlapPolicy.values:
        raise InvalidInput(
            f"overlap must be one of {', '.join(OverlapPolicy.values)}, not {value!r}", code="invalid_overlap"
        )
    return value


@tenant_of_call
def schedule_create(
    *,
    tenant: Tenant,
    workflow_name: str,
    input: Any,
    actor: str,
    cron: str | None = None,
    interval_seconds: int | None = None,
    overlap: str = OverlapPolicy.SKIP,
    enabled: bool = True,
    subject: str = "",
    now: datetime | None = None,
) -> WorkflowSchedule:
    """Store a schedule whose first slot is the first one after now; bad input stores nothing."""
    timing = _timing(cron=cron, interval_seconds=interval_seconds)
    _check_run_request(workflow_name=workflow_name, input=input)
    with transaction.atomic():
        _quota_check(tenant)
        return WorkflowSchedule.objects.create(
            tenant=tenant,
            workflow_name=workflow_name,
            cron=timing.cron,
            interval_seconds=timing.interval_seconds,
            input=input,
            subject=subject,
            overlap=_overlap(overlap),
            enabled=enabled,
            next_fire_at=_first_slot(timing, now or timezone.now()),
            created_by=actor,
        )


def _quota_check(tenant: Tenant) -> None:
    """ScheduleQuotaExceeded if the tenant has KEEPER_SCHEDULES_PER_TENANT schedules already. The
    tenant's creations wait for one another here, so two at once cannot both take the last place."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", [f"schedules:{tenant.tenant_id}"]
        )
    quota = settings.KEEPER_SCHEDULES_PER_TENANT
    if WorkflowSchedule.objects.filter(tenant_id=tenant.tenant_id).count() >= quota:
        raise ScheduleQuotaExceeded(
            f"tenant {tenant.slug} has {quota} schedules, its most (KEEPER_SCHEDULES_PER_TENANT); "
            "delete one first",
            details={"quota": quota},
        )


@tenant_of_call
def schedule_get(*, tenant: Tenant, schedule_id: UUID) -> WorkflowSchedule:
    schedule = WorkflowSchedule.objects.filter(tenant=tenant, schedule_id=schedule_id).first()
    if schedule is None:
        raise NotFound(f"no schedule {schedule_id}", code="schedule_not_found")
    return schedule


@tenant_of_call
def schedule_list(*, tenant: Tenant) -> list[WorkflowSchedule]:
    return list(WorkflowSchedule.objects.filter(tenant=tenant).order_by("workflow_name", "created_at"))


_UNSET: Any = object()


@tenant_of_call
def schedule_update(
    *,
    tenant: Tenant,
    schedule_id: UUID,
    actor: str,
    enabled: bool | None = None,
    input: Any = _UNSET,
    overlap: str | None = None,
    cron: str | None = None,
    interval_seconds: int | None = None,
    now: datetime | None = None,
) -> WorkflowSchedule:
    """Pause, resume or change a schedule. A new timing, or a resume, counts slots from now on
    (a paused schedule does not catch up on the slots it slept through)."""
    now = now or timezone.now()
    with transaction.atomic():
        schedule = schedule_get(tenant=tenant, schedule_id=schedule_id)
        schedule = WorkflowSchedule.objects.select_for_update().get(schedule_id=schedule.schedule_id)
        recount = False
        if cron is not None or interval_seconds is not None:
            timing = _timing(cron=cron, interval_seconds=interval_seconds)
            schedule.cron, schedule.interval_seconds = timing.cron, timing.interval_seconds
            recount = True
        if input is not _UNSET:
            _check_run_request(workflow_name=schedule.workflow_name, input=input)
            schedule.input = input
        if overlap is not None:
            schedule.overlap = _overlap(overlap)
        if enabled is not None:
            recount = recount or (enabled and not schedule.enabled)
            schedule.enabled = enabled
        if recount:
            schedule.next_fire_at = _first_slot(Timing(schedule.cron, schedule.interval_seconds), now)
        schedule.save()
    logger.info("schedule %s changed by %s", schedule.schedule_id, actor)
    return schedule


@tenant_of_call
def schedule_delete(*, tenant: Tenant, schedule_id: UUID, actor: str) -> None:
    schedule = schedule_get(tenant=tenant, schedule_id=schedule_id)
    schedule.delete()
    logger.info("schedule %s deleted by %s", schedule_id, actor)


def schedule_slot_key(*, schedule_id: UUID, slot: datetime) -> str:
    """The idempotency key of the run of one slot: two firings of a slot are one run."""
    return f"schedule:{schedule_id}:{slot.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def _due_slot(schedule: WorkflowSchedule, now: datetime) -> tuple[datetime, datetime]:
    """(the latest slot at or before now, the slot after it): missed slots before it are passed over."""
    if schedule.cron:
        cron = cron_parse(schedule.cron)
        slot = cron.latest_at_or_before(now) or schedule.next_fire_at
        slot = max(slot, schedule.next_fire_at)
        return slot, cron.next_after(slot)
    interval = timedelta(seconds=int(schedule.interval_seconds or 0))
    missed = (now - schedule.next_fire_at) // interval
    slot = schedule.next_fire_at + missed * interval
    return slot, slot + interval


@dataclass(frozen=True)
class Fired:
    schedule_id: UUID
    slot: datetime
    outcome: str  # "started", "skipped" (overlap), "error"
    run_id: UUID | None = None


def _fire(schedule: WorkflowSchedule, now: datetime) -> Fired:
    slot, following = _due_slot(schedule, now)
    schedule.next_fire_at, schedule.last_slot = following, slot
    previous = (
        AgentRun.objects.filter(run_id=schedule.last_run_id).values_list("status", flat=True).first()
        if schedule.last_run_id
        else None
    )
    if schedule.overlap == OverlapPolicy.SKIP and previous in ACTIVE_RUN_STATUSES:
        schedule.skipped_count += 1
        schedule.last_skipped_slot = slot
        schedule.save(
            update_fields=["next_fire_at", "last_slot", "skipped_count", "last_skipped_slot", "updated_at"]
        )
        return Fired(schedule.schedule_id, slot, "skipped", schedule.last_run_id)
    try:
        with transaction.atomic():
            started = run_start(
                tenant=schedule.tenant,
                workflow_name=schedule.workflow_name,
                input=schedule.input,
                actor=f"schedule:{schedule.schedule_id}",
                idempotency_key=schedule_slot_key(schedule_id=schedule.schedule_id, slot=slot),
                subject=schedule.subject,
            )
    except ApplicationError as exc:
        schedule.last_error = f"{slot:%Y-%m-%d %H:%M:%S} UTC: {exc.code}: {exc}"[:2000]
        schedule.save(update_fields=["next_fire_at", "last_slot", "last_error", "updated_at"])
        logger.warning("schedule %s could not start its run for %s: %s", schedule.schedule_id, slot, exc)
        return Fired(schedule.schedule_id, slot, "error")
    schedule.last_run_id = started.run.run_id
    schedule.last_error = ""
    schedule.fired_count += 1 if started.created else 0
    schedule.save(
        update_fields=["next_fire_at", "last_slot", "last_run_id", "last_error", "fired_count", "updated_at"]
    )
    return Fired(schedule.schedule_id, slot, "started", started.run.run_id)


def schedules_fire_tenant(*, tenant: Tenant, now: datetime | None = None, limit: int = 100) -> list[Fired]:
    """Fire this tenant's due schedules: each claimed row is locked until its run and its next slot
    are committed together; rows another beat holds are skipped (it is firing them)."""
    now = now or timezone.now()
    with tenant_bind(tenant.tenant_id), transaction.atomic():
        due = list(
            WorkflowSchedule.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("tenant")
            .filter(tenant=tenant, enabled=True, next_fire_at__lte=now)
            .order_by("next_fire_at")[:limit]
        )
        return [_fire(schedule, now) for schedule in due]


def schedules_fire(*, now: datetime | None = None) -> int:
    """The beat's sweep: fire every tenant's due schedules; the number of runs started."""
    started = 0
    for tenant in Tenant.objects.all():
        fired = schedules_fire_tenant(tenant=tenant, now=now)
        started += sum(1 for f in fired if f.outcome == "started")
    if started:
        logger.info("schedules: started %d run(s)", started)
    return started


@dataclass(frozen=True)
class ScheduleView:
    """A schedule as the console and the API show it: with its last run's status."""

    schedule: WorkflowSchedule
    last_run_status: str | None


def schedule_views(*, tenant: Tenant | None) -> list[ScheduleView]:
    """A tenant's schedules, or (None) every schedule row-level security shows this request (a
    console user's tenants), each with its last run's status."""
    if tenant is not None:
        with tenant_bind(tenant.tenant_id):
            return schedule_views(tenant=None)
    schedules = list(
        WorkflowSchedule.objects.select_related("tenant").order_by(
            "tenant__slug", "workflow_name", "created_at"
        )
    )
    statuses = dict(
        AgentRun.objects.filter(run_id__in=[s.last_run_id for s in schedules if s.last_run_id]).values_list(
            "run_id", "status"
        )
    )
    return [ScheduleView(s, statuses.get(s.last_run_id) if s.last_run_id else None) for s in schedules]


def schedule_visible(*, schedule_id: UUID) -> WorkflowSchedule:
    """The schedule, if row-level security shows it to this request (a console user's tenants)."""
    schedule = WorkflowSchedule.objects.select_related("tenant").filter(schedule_id=schedule_id).first()
    if schedule is None:
        raise NotFound(f"no schedule {schedule_id}", code="schedule_not_found")
    return schedule
