"""LangGraph's checkpoints, channel values and pending writes of a thread (a Keeper run), per tenant.

A checkpoint's row is the thread's record of it (the run's event log records only the checkpoints
someone made, by update_state or a fork); these tables hold what LangGraph needs to load it back: the checkpoint's structure, its channel values by version, and the writes of a
superstep not finished yet. Every row carries its tenant for row-level security (migration 0010).
"""

from __future__ import annotations

from django.db import models


class LangGraphCheckpoint(models.Model):
    pk = models.CompositePrimaryKey("tenant_id", "thread_id", "checkpoint_ns", "checkpoint_id")
    tenant_id = models.UUIDField()
    run = models.ForeignKey(
        "runs.AgentRun",
        on_delete=models.CASCADE,
        db_column="run_id",
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    thread_id = models.TextField()
    checkpoint_ns = models.TextField(default="")
    checkpoint_id = models.TextField()
    parent_checkpoint_id = models.TextField(null=True, blank=True)
    # The checkpoint without its channel values (those are in langgraph_blobs, by version).
    checkpoint = models.JSONField()
    metadata = models.JSONField()
    # The run's revision when the checkpoint was put (the last time, if put again): the seq of the
    # event that recorded it for one someone made (update_state, a fork), else of the run's latest event.
    seq = models.BigIntegerField()

    class Meta:
        db_table = "langgraph_checkpoints"
        indexes = [models.Index(fields=["run"], name="langgraph_checkpoints_run_idx")]

    def __str__(self) -> str:
        return f"{self.thread_id}/{self.checkpoint_ns}/{self.checkpoint_id}"


class LangGraphBlob(models.Model):
    pk = models.CompositePrimaryKey("tenant_id", "thread_id", "checkpoint_ns", "channel", "version")
    tenant_id = models.UUIDField()
    run = models.ForeignKey(
        "runs.AgentRun",
        on_delete=models.CASCADE,
        db_column="run_id",
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    thread_id = models.TextField()
    checkpoint_ns = models.TextField(default="")
    channel = models.TextField()
    version = models.TextField()
    type = models.TextField()
    blob = models.BinaryField(null=True)

    class Meta:
        db_table = "langgraph_blobs"

    def __str__(self) -> str:
        return f"{self.thread_id}/{self.checkpoint_ns} {self.channel}@{self.version}"


class LangGraphWrite(models.Model):
    pk = models.CompositePrimaryKey(
        "tenant_id", "thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"
    )
    tenant_id = models.UUIDField()
    run = models.ForeignKey(
        "runs.AgentRun",
        on_delete=models.CASCADE,
        db_column="run_id",
        related_name="+",
        db_constraint=False,
        db_index=False,
    )
    thread_id = models.TextField()
    checkpoint_ns = models.TextField(default="")
    checkpoint_id = models.TextField()
    task_id = models.TextField()
    task_path = models.TextField(default="")
    idx = models.IntegerField()
    channel = models.TextField()
    type = models.TextField()
    blob = models.BinaryField(null=True)

    class Meta:
        db_table = "langgraph_writes"

    def __str__(self) -> str:
        return f"{self.thread_id}/{self.checkpoint_ns}/{self.checkpoint_id} {self.task_id}#{self.idx}"
