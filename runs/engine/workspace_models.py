"""A run's workspace snapshots: one manifest (path -> digest, size) per snapshot, bytes in the artifact store."""

from __future__ import annotations

from django.db import models


class WorkspaceSnapshot(models.Model):
    """The run's files as they were right after event `seq` (the manifest names stored blobs only)."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    run = models.ForeignKey("runs.AgentRun", on_delete=models.CASCADE, db_column="run_id")
    seq = models.BigIntegerField()
    reason = models.TextField()  # interval, suspend, side_effect, slice_end, finished, fork
    manifest = models.JSONField(default=dict)  # {path: {"digest", "size"}} (older ones: "uri" too)
    # What each step since the previous snapshot changed, oldest first: [{"seq", "files": {path: ref or
    # null (deleted)}}]. A fork or a look at a seq between two snapshots replays it onto the earlier one.
    changes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "workspace_snapshots"
        constraints = [models.UniqueConstraint(fields=("run", "seq"), name="workspace_snapshots_run_seq")]

    def __str__(self) -> str:
        return f"workspace of {self.run_id} at {self.seq}"
