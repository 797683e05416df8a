"""Who may see which tenant in the console, and the append-only record of every human action."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Membership(models.Model):
    """A console user belongs to one or more tenants and sees only those (a superuser sees all)."""

    id = models.BigAutoField(primary_key=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey("core.Tenant", on_delete=models.CASCADE, db_column="tenant_id")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "console_memberships"
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="console_memberships_unique")]

    def __str__(self) -> str:
        return f"{self.user_id} in {self.tenant_id}"


class AuditEntry(models.Model):
    """One human action (approve, reject, reconcile, resume, cancel, fork, erase, sign-in...).

    Append-only: a trigger (migration 0002) refuses UPDATE and DELETE, whoever asks. Partitioned by
    month of `at` (migration 0007; the primary key is (id, at)): an operator's retention
    (KEEPER_AUDIT_RETENTION_DAYS, unset by default) drops whole months, never rows.
    """

    id = models.BigAutoField(primary_key=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    actor = models.TextField()  # "user:<username>", kept even if the user is deleted
    tenant = models.ForeignKey(
        "core.Tenant", on_delete=models.PROTECT, null=True, blank=True, db_column="tenant_id"
    )
    action = models.TextField()
    target_type = models.TextField(blank=True, default="")
    target_id = models.TextField(blank=True, default="")
    note = models.TextField(blank=True, default="")
    details = models.JSONField(default=dict)
    remote_addr = models.TextField(blank=True, default="")

    class Meta:
        db_table = "console_audit_log"
        ordering = ["-id"]
        verbose_name_plural = "audit entries"
        indexes = [
            models.Index(fields=["target_type", "target_id"], name="console_audit_target"),
            # The log sorted by actor or by action (AUDIT_ORDERS), the id breaking ties.
            models.Index(fields=["actor", "id"], name="console_audit_actor"),
            models.Index(fields=["action", "id"], name="console_audit_action"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target_type}:{self.target_id}"
