"""An erasure request: a person's request to forget everything kept about them, and its receipt."""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q


class ErasureStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class ErasureRequest(models.Model):
    """A person's request to forget everything kept about them, and the receipt that proves it."""

    request_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    # The receipt names the subject by digest only; the request keeps the id until it is done.
    subject_id = models.TextField()
    subject_digest = models.TextField()
    requested_by = models.TextField()
    status = models.TextField(choices=ErasureStatus.choices, default=ErasureStatus.PENDING)
    progress = models.JSONField(default=dict)
    receipt = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    # The texts a failed attempt searched for, kept like the subject's id until a retry is clean: the
    # attempt erased what it could, so a retry could no longer find the texts it erased from the
    # subject's runs, and would have certified clean a copy elsewhere that it no longer looked for.
    searched = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "erasure_requests"
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in ErasureStatus]), name="erasure_requests_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"erasure {self.request_id} ({self.status})"
