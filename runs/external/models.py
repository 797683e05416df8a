"""An external workflow as a tenant registered it: name, version, ordered step names, declared tools."""

from __future__ import annotations

from django.db import models


class ExternalWorkflow(models.Model):
    """One (name, version) of a tenant's workflow whose steps run in the tenant's own workers.

    Immutable once registered: a changed list of steps is a new version (like code workflows).
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    name = models.CharField(max_length=200)
    version = models.CharField(max_length=50)
    steps = models.JSONField()  # ["lookup", "refund", ...]: the first is where a run starts
    tools = models.JSONField(default=list)  # [{"name": ..., "version": ...}] its operations use
    input_schema = models.JSONField(null=True, blank=True)  # a JSON Schema every run's input must pass
    approval_guarded_steps = models.JSONField(default=list)
    signals = models.JSONField(default=list)  # names of the signals its runs accept
    description = models.TextField(blank=True, default="")
    created_by = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "external_workflows"
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name", "version"], name="external_workflows_name_version"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} {self.version} (external)"
