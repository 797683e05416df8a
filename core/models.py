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


class StoredArtifact(models.Model):
    """One blob Keeper stored for a tenant (core/artifacts/): the only way to reach stored bytes.

    A reference kept elsewhere (a workspace manifest, a tool result, a run's state) names the digest;
    reading resolves it through this tenant's row, never through a path or URI taken from the data.
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, db_column="tenant_id")
    digest = models.CharField(max_length=71)  # "sha256:" + 64 hex digits
    store = models.CharField(max_length=16)  # the backend that holds it: local or s3
    key = models.CharField(max_length=200)  # where in that store: <tenant>/<hh>/<hex>
    size = models.BigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    # Every put of the same bytes touches it: reclaim waits a grace period after the last one, so a
    # blob whose referencing row is still being written is never taken.
    touched_at = models.DateTimeField(auto_now_add=True)
    checked_at = models.DateTimeField(null=True, blank=True)  # the sweep last found it referenced

    class Meta:
        db_table = "stored_artifacts"
        constraints = [
            models.UniqueConstraint(fields=("tenant", "digest"), name="stored_artifacts_tenant_digest"),
            models.CheckConstraint(
                condition=models.Q(digest__regex=r"^sha256:[0-9a-f]{64}$"), name="stored_artifacts_digest"
            ),
            models.CheckConstraint(condition=models.Q(size__gte=0), name="stored_artifacts_size"),
        ]
        indexes = [
            # The sweep's order: never checked first, then those checked longest ago.
            models.Index(
                models.F("checked_at").asc(nulls_first=True),
                models.F("id"),
                name="stored_artifacts_sweep_idx",
            ),
            # Whether another row names the same object (blobs stored before keys carried the tenant).
            models.Index(fields=("store", "key"), name="stored_artifacts_key_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.digest} of {self.tenant_id}"
