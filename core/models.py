"""Tenants: every run, memory item and document belongs to exactly one."""

from __future__ import annotations

import uuid

from django.db import models


class Tenant(models.Model):
    tenant_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "tenants"
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class ApiKeyScope(models.TextChoices):
    READ = "read", "read"
    WRITE = "write", "write"


class ApiKey(models.Model):
    """A per-tenant API key. Only the prefix and a SHA-256 of the secret are stored, never the secret."""

    key_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(
        Tenant, on_delete=models.PROTECT, db_column="tenant_id", related_name="api_keys"
    )
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_sha256 = models.CharField(max_length=64)
    scope = models.CharField(max_length=5, choices=ApiKeyScope.choices)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "api_keys"
        ordering = ["tenant", "name"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(scope__in=["read", "write"]), name="api_keys_scope_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"kp_{self.prefix}_… ({self.name}, {self.scope})"


class OffboardingStatus(models.TextChoices):
    EXPORTED = "exported", "exported"
    ERASING = "erasing", "erasing"
    COMPLETED = "completed", "completed"
    FAILED = "failed", "failed"


class TenantOffboarding(models.Model):
    """One export or erasure of a whole tenant, and its receipt.

    Deliberately no foreign key to tenants and no row-level security: the row outlives the tenant it
    describes (the receipt is the proof the erasure happened). It holds ids, counts, index names and
    digests, never a subject's data.
    """

    offboarding_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant_id = models.UUIDField(db_index=True)
    tenant_slug = models.CharField(max_length=64)
    status = models.CharField(max_length=10, choices=OffboardingStatus.choices)
    requested_by = models.TextField()
    export_digest = models.CharField(max_length=64, blank=True, default="")
    progress = models.JSONField(default=dict)
    receipt = models.JSONField(default=dict)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "tenant_offboardings"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.tenant_slug} {self.status}"
