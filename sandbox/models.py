"""The fake external payments system: orders, the refund ledger (what crash tests count) and faults.

These tables belong to the "other company": nothing in Keeper reads them except over HTTP.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

MAX_ID_LENGTH = 200


class OrderStatus(models.TextChoices):
    PENDING = "pending"
    SHIPPED = "shipped"
    DELIVERED = "delivered"
    CANCELLED = "cancelled"


class RefundStatus(models.TextChoices):
    APPLIED = "applied"


class FaultName(models.TextChoices):
    # Faults of POST /sandbox/refunds.
    ERROR_BEFORE_APPLY = "error_before_apply"
    SLOW_RESPONSE = "slow_response"
    DROP_AFTER_APPLY = "drop_after_apply"
    # Faults of the authoritative lookup GET /sandbox/refunds?idempotency_key=.
    LOOKUP_NON_AUTHORITATIVE = "lookup_non_authoritative"
    LOOKUP_UNAVAILABLE = "lookup_unavailable"


APPLY_FAULTS = frozenset({FaultName.ERROR_BEFORE_APPLY, FaultName.SLOW_RESPONSE, FaultName.DROP_AFTER_APPLY})
LOOKUP_FAULTS = frozenset({FaultName.LOOKUP_NON_AUTHORITATIVE, FaultName.LOOKUP_UNAVAILABLE})


class SandboxOrder(models.Model):
    order_id = models.CharField(primary_key=True, max_length=MAX_ID_LENGTH)
    customer_id = models.CharField(max_length=MAX_ID_LENGTH)
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    status = models.TextField(choices=OrderStatus.choices)
    delivered_at = models.DateTimeField(null=True, blank=True)
    category = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "sandbox_orders"
        ordering = ["order_id"]
        constraints = [
            models.CheckConstraint(condition=Q(amount_minor__gt=0), name="sandbox_orders_amount_positive"),
            models.CheckConstraint(
                condition=Q(currency__regex=r"^[A-Z]{3}$"), name="sandbox_orders_currency_code"
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in OrderStatus]), name="sandbox_orders_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.order_id} ({self.status}, {self.amount_minor} {self.currency})"


class SandboxRefund(models.Model):
    """One applied refund. The UNIQUE idempotency key is what makes a key apply at most once."""

    id = models.BigAutoField(primary_key=True)
    refund_id = models.CharField(max_length=64, unique=True)
    order = models.ForeignKey(
        SandboxOrder, on_delete=models.PROTECT, db_column="order_id", related_name="refunds"
    )
    amount_minor = models.BigIntegerField()
    currency = models.CharField(max_length=3)
    status = models.TextField(choices=RefundStatus.choices, default=RefundStatus.APPLIED)
    idempotency_key = models.CharField(max_length=MAX_ID_LENGTH, unique=True)
    # sha256 of the canonical JSON of order_id + amount_minor + currency: a key reused for another
    # request is refused instead of replaying the wrong refund.
    request_digest = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "sandbox_refunds"
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(amount_minor__gt=0), name="sandbox_refunds_amount_positive"),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in RefundStatus]), name="sandbox_refunds_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.refund_id} {self.amount_minor} {self.currency} for {self.order_id}"


class SandboxFault(models.Model):
    """A fault to inject: for one order or (order_id NULL) for all, a number of times or until cleared."""

    id = models.BigAutoField(primary_key=True)
    fault = models.TextField(choices=FaultName.choices)
    # Not a foreign key: a fault may be armed before its order is seeded.
    order_id = models.CharField(max_length=MAX_ID_LENGTH, null=True, blank=True)
    # Firings left; NULL fires until cleared, 0 is spent.
    remaining = models.IntegerField(null=True, blank=True)
    delay_s = models.FloatField(default=5.0)
    fired = models.IntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        db_table = "sandbox_faults"
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=Q(fault__in=[f.value for f in FaultName]), name="sandbox_faults_name_valid"
            ),
            models.CheckConstraint(
                condition=Q(remaining__isnull=True) | Q(remaining__gte=0),
                name="sandbox_faults_remaining_nonnegative",
            ),
            models.CheckConstraint(condition=Q(delay_s__gte=0), name="sandbox_faults_delay_nonnegative"),
        ]

    def __str__(self) -> str:
        scope = self.order_id or "all orders"
        return (
            f"{self.fault} for {scope} ({'until cleared' if self.remaining is None else self.remaining} left)"
        )
