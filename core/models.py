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
