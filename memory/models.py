"""Long-term memory: narrow, checkable claims with provenance, scope, TTL and invalidation.

The table follows chapter 33. A new value never overwrites an old one: it supersedes it (the old row
is invalidated with reason "superseded", its value untouched). Row-level security scopes every row
to its tenant inside PostgreSQL (migration 0002): with no tenant set, nothing is visible.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

PROVENANCE_KEYS = ["source_type", "source_id", "source_version", "run_id", "event_seq", "validation_method"]


class MemoryItem(models.Model):
    memory_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    # Whom the claim is about, as the tenant's systems name them (a customer id, a user id).
    subject_id = models.TextField()
    namespace = models.TextField()
    key = models.TextField()
    value = models.JSONField()
    schema_version = models.IntegerField(default=1)
    # {source_type, source_id, source_version, run_id, event_seq, validation_method}
    provenance = models.JSONField()
    confidence = models.FloatField(null=True, blank=True)
    valid_from = models.DateTimeField()
    expires_at = models.DateTimeField(null=True, blank=True)
    invalidated_at = models.DateTimeField(null=True, blank=True)
    invalidation_reason = models.TextField(null=True, blank=True)
    supersedes = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, db_column="supersedes",
                                   related_name="superseded_by")  # fmt: skip
    consent_basis = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "memory_items"
        ordering = ["-valid_from"]
        constraints = [
            models.CheckConstraint(
                condition=Q(confidence__isnull=True) | (Q(confidence__gte=0) & Q(confidence__lte=1)),
                name="memory_items_confidence_0_1",
            ),
            models.CheckConstraint(
                condition=Q(provenance__has_keys=PROVENANCE_KEYS), name="memory_items_provenance"
            ),
            models.CheckConstraint(
                condition=Q(invalidated_at__isnull=True) | Q(invalidation_reason__isnull=False),
                name="memory_items_invalidated_has_reason",
            ),
            # One current claim per (tenant, subject, namespace, key): a new one supersedes it.
            models.UniqueConstraint(
                fields=["tenant", "subject_id", "namespace", "key"],
                condition=Q(invalidated_at__isnull=True),
                name="memory_items_one_current",
            ),
        ]
        indexes = [models.Index(fields=["tenant", "subject_id", "namespace"], name="memory_items_scope_idx")]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.key} of {self.subject_id}"
