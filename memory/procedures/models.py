"""Procedural memory: how a kind of request was done before, learned from runs that did it.

A procedure is the ordered tool calls of a turn that solved a request (tool names and the shapes of
their arguments, never their values), for one workflow, with the words that name the kind of request.
Runs of the same shape add sources to one procedure. A person confirms it before any context gets it.
"""

from __future__ import annotations

import uuid

from django.db import models


class ProcedureStatus(models.TextChoices):
    PROPOSED = "proposed", "proposed"  # learned, waiting for a person
    CONFIRMED = "confirmed", "confirmed"  # offered to the context builder
    REJECTED = "rejected", "rejected"  # a person said no: learning the same shape again does not ask again


class Procedure(models.Model):
    procedure_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    workflow_name = models.TextField()
    # sha256 of the canonical steps as learned: runs of the same shape share one procedure.
    shape_digest = models.CharField(max_length=100)
    name = models.TextField()
    trigger = models.JSONField(default=list)  # the words of a request of this kind
    steps = models.JSONField(default=list)  # [{"tool": name, "arguments": {argument: type}}]
    status = models.CharField(max_length=9, choices=ProcedureStatus.choices, default=ProcedureStatus.PROPOSED)
    version = models.PositiveIntegerField(default=1)  # +1 at each edit
    decided_by = models.TextField(blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True, default="")
    invalidated_at = models.DateTimeField(null=True, blank=True)
    invalidation_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        app_label = "memory"
        db_table = "memory_procedures"
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "workflow_name", "shape_digest"], name="memory_procedure_one_per_shape"
            ),
            models.CheckConstraint(
                condition=models.Q(status__in=["proposed", "confirmed", "rejected"]),
                name="memory_procedure_status",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "workflow_name", "status"], name="memory_procedure_use_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.status})"


class ProcedureSource(models.Model):
    """One turn of one run that did the procedure: the request's event and the reply's."""

    source_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    procedure = models.ForeignKey(
        Procedure, on_delete=models.CASCADE, db_column="procedure_id", related_name="sources"
    )
    run_id = models.UUIDField()
    request_seq = models.IntegerField()  # the user message
    reply_seq = models.IntegerField()  # the answer that closed the turn
    subject_id = models.TextField(blank=True, default="")  # the run's subject: erased with them
    invalidated_at = models.DateTimeField(null=True, blank=True)
    invalidation_reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        app_label = "memory"
        db_table = "memory_procedure_sources"
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["procedure", "run_id", "request_seq"], name="memory_procedure_source_once"
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "subject_id"], name="memory_procsrc_subject_idx"),
            models.Index(fields=["tenant", "run_id"], name="memory_procsrc_run_idx"),
        ]

    def __str__(self) -> str:
        return f"run {self.run_id} {self.request_seq}..{self.reply_seq}"
