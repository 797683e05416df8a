"""A run's workspace snapshots: one manifest (path -> digest, size) per snapshot, bytes in the artifact store."""

from __future__ import annotations

from django.db import models


class WorkspaceSnapshot(models.Model):
    """The run's files as they were right after event `seq` (the manifest names stored blobs only)."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    run = models.ForeignKey("runs.AgentRun", on_delete=models.CASCADE, db_column="run_id")
    seq = models.BigIntegerField()
    reason = models.TextField()  # interval, suspend, side_effect, slice_end, finished, fork, merge
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


class MergeStatus(models.TextChoices):
    CONFLICTS = "conflicts", "conflicts open"
    APPLIED = "applied", "applied"
    ABANDONED = "abandoned", "abandoned"


class WorkspaceMerge(models.Model):
    """One merge of a branch's workspace into another run of its tree: what it was merged against and,
    while conflicts are open, the hunks a person or the workflow's resolver picks from."""

    merge_id = models.UUIDField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    target = models.ForeignKey(
        "runs.AgentRun", on_delete=models.CASCADE, db_column="target_run_id", related_name="merges_in"
    )
    source = models.ForeignKey(
        "runs.AgentRun", on_delete=models.CASCADE, db_column="source_run_id", related_name="merges_out"
    )
    base_run_id = models.UUIDField()  # the run whose files at base_seq both sides started from
    base_seq = models.BigIntegerField()
    source_seq = models.BigIntegerField(null=True)  # the source's snapshot merged (None: it has no files)
    target_seq = models.BigIntegerField(null=True)  # the target's snapshot merged into
    target_revision = models.BigIntegerField()  # the target's revision once the merge was recorded on it
    status = models.TextField(choices=MergeStatus.choices)
    # [{"id", "path", "kind": text|binary|deleted, "base", "ours", "theirs"}]: the hunks to pick from
    # (text, or None for a side that deleted the file / a binary file's digest). Emptied once applied.
    conflicts = models.JSONField(default=list)
    # The result's files that are settled ({path: ref}), and each conflicting file's three versions
    # ({path: {"base", "ours", "theirs": ref or None}}): a resolution needs no snapshot, and reclaim
    # keeps these blobs while the merge is kept.
    manifest = models.JSONField(default=dict)
    sides = models.JSONField(default=dict)
    # {path: "ours" | "theirs" | "merged" | "resolved"}: where each changed file of the result came from.
    taken = models.JSONField(default=dict)
    state_taken = models.JSONField(default=dict)  # {key: "theirs"} or {"rule": name}: the state's merge
    result_seq = models.BigIntegerField(null=True)  # the target's workspace_merged event
    actor = models.TextField()
    resolved_by = models.TextField(default="")
    created_at = models.DateTimeField(auto_now_add=True)
    applied_at = models.DateTimeField(null=True)

    class Meta:
        db_table = "workspace_merges"
        indexes = [models.Index(fields=("target", "status"), name="workspace_merges_target")]
        constraints = [
            # One open merge per target: its run waits on it, and a second would merge into files
            # the first is about to change.
            models.UniqueConstraint(
                fields=("target",), condition=models.Q(status="conflicts"), name="workspace_merges_one_open"
            )
        ]

    def __str__(self) -> str:
        return f"merge {self.merge_id} of {self.source_id} into {self.target_id}"
