"""Claims held for review: memory writes that looked like instructions, permission changes, policy
overrides or hidden text wait here for a person (support or compliance) instead of becoming memory."""

from __future__ import annotations

import uuid

from django.db import models

# The signal of a held claim that waits for the subject's consent (memory/consent.py), beside the
# screen's: instruction, permission_change, policy_override, hidden_text.
UNCONFIRMED = "unconfirmed"


class HeldStatus(models.TextChoices):
    HELD = "held", "held"
    APPROVED = "approved", "approved"
    REJECTED = "rejected", "rejected"


class Trust(models.TextChoices):
    LOW = "low", "low"  # a user's statement, a model's inference
    MEDIUM = "medium", "medium"  # a tool's result, an import
    HIGH = "high", "high"  # an operator's entry (not screened)


class HeldClaim(models.Model):
    held_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    subject_id = models.TextField()
    namespace = models.TextField()
    key = models.TextField()
    value = models.JSONField()
    provenance = models.JSONField()
    source = models.TextField()  # provenance.source_id: what a rollback names
    trust = models.CharField(max_length=6, choices=Trust.choices)
    # instruction, permission_change, policy_override, hidden_text; unconfirmed: waits for consent
    signals = models.JSONField(default=list)
    # The basis its writer stated (or none): what the claim is kept with once a person approves it.
    consent_basis = models.TextField(null=True, blank=True)
    status = models.CharField(max_length=8, choices=HeldStatus.choices, default=HeldStatus.HELD)
    decided_by = models.TextField(blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, default="")
    memory_id = models.UUIDField(null=True, blank=True)  # the item an approval made
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "memory"
        db_table = "memory_held_claims"
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["tenant", "status", "-created_at"], name="memory_held_status_idx"),
            models.Index(fields=["tenant", "source"], name="memory_held_source_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.key} ({self.status})"
