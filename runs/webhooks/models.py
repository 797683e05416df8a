"""A tenant's webhook subscriptions and the outbox of deliveries the commit statement writes."""

from __future__ import annotations

import uuid

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Q

# The run events a tenant can subscribe to (the commit and transition statements write these).
EVENT_TYPES = (
    "run.suspended.approval",
    "run.suspended.reconciliation",
    "run.completed",
    "run.failed",
    "erasure.finished",
)


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"  # waiting for its next attempt (the first one, or a retry)
    DELIVERED = "delivered"  # the receiver answered 2xx
    FAILED = "failed"  # every attempt failed; kept for the console, never sent again
    CANCELLED = "cancelled"  # its subscription was deleted before it could be delivered


class WebhookSubscription(models.Model):
    """An endpoint that receives signed POSTs for some event types of its tenant.

    The secret is kept as given (HMAC signing needs the secret itself, not a hash); no API, page or
    log shows it again after the response that created the subscription.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    url = models.TextField()
    event_types = ArrayField(models.TextField())
    secret = models.TextField()
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    deleted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "webhook_subscriptions"
        indexes = [
            models.Index(fields=["tenant"], condition=Q(deleted_at__isnull=True), name="webhook_subs_active"),
        ]
        constraints = [
            # One live subscription per endpoint: a subscribe sent twice delivered every event twice.
            models.UniqueConstraint(
                fields=["tenant", "url"],
                condition=Q(deleted_at__isnull=True),
                name="webhook_subs_one_per_url",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.url} ({', '.join(self.event_types)})"


class WebhookDelivery(models.Model):
    """One event for one subscription: sent until the receiver accepts it or attempts run out.

    `event_id` is the same for every subscription of one event (receivers deduplicate by it);
    `data` holds ids, codes and counts only, never a subject's data. Partitioned by month of
    `created_at` (migration 0040; the primary key is (id, created_at)): retention drops whole months
    once none of their deliveries is pending (KEEPER_WEBHOOK_DELIVERIES_RETENTION_DAYS).
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    subscription = models.ForeignKey(WebhookSubscription, on_delete=models.PROTECT, related_name="deliveries")
    event_id = models.UUIDField()
    event_type = models.TextField()
    run_id = models.UUIDField(null=True, blank=True)
    data = models.JSONField(default=dict)
    status = models.TextField(choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.IntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    last_status_code = models.IntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    history = models.JSONField(default=list)  # [{"at", "status_code", "error", "ms"}] one per attempt
    created_at = models.DateTimeField()
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "webhook_deliveries"
        verbose_name_plural = "webhook deliveries"
        constraints = [
            # The partition key (created_at, monthly) is in every unique key, as PostgreSQL requires.
            models.UniqueConstraint(
                fields=["subscription", "event_id", "created_at"], name="webhook_deliveries_once"
            ),
        ]
        indexes = [
            models.Index(
                fields=["next_attempt_at"], condition=Q(status="pending"), name="webhook_deliveries_due"
            ),
            models.Index(fields=["tenant", "-created_at"], name="webhook_deliveries_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id} → {self.subscription_id}: {self.status}"
