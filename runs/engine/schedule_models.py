"""A tenant's schedule: start a workflow on a cron expression or every N seconds (runs/engine/schedules.py)."""

from __future__ import annotations

import uuid

from django.db import models


class OverlapPolicy(models.TextChoices):
    SKIP = "skip"  # no new run while the previous run of this schedule is running or suspended
    QUEUE = "queue"  # start anyway


class WorkflowSchedule(models.Model):
    """Exactly one of `cron` and `interval_seconds` is set. `next_fire_at` is the next slot; the beat
    fires a due schedule once per slot (the run's idempotency key names the slot)."""

    schedule_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    workflow_name = models.TextField()
    cron = models.TextField(blank=True, default="")
    interval_seconds = models.IntegerField(null=True, blank=True)
    input = models.JSONField(default=dict)
    subject = models.TextField(blank=True, default="")
    overlap = models.TextField(choices=OverlapPolicy.choices, default=OverlapPolicy.SKIP)
    enabled = models.BooleanField(default=True)
    next_fire_at = models.DateTimeField()
    last_slot = models.DateTimeField(null=True, blank=True)
    last_run_id = models.UUIDField(null=True, blank=True)
    last_skipped_slot = models.DateTimeField(null=True, blank=True)
    # Why the last due slot started no run (a workflow no longer deployed, an input it now refuses).
    last_error = models.TextField(blank=True, default="")
    fired_count = models.IntegerField(default=0)
    skipped_count = models.IntegerField(default=0)
    created_by = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "workflow_schedules"
        indexes = [
            models.Index(
                fields=["next_fire_at"], name="workflow_schedules_due", condition=models.Q(enabled=True)
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=(models.Q(cron="") & models.Q(interval_seconds__gt=0))
                | (~models.Q(cron="") & models.Q(interval_seconds__isnull=True)),
                name="workflow_schedules_cron_or_interval",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_name} every {self.cron or f'{self.interval_seconds}s'}"
