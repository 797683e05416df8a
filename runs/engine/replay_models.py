"""Evaluation sets (runs kept to be replayed), rounds (one run of a set, or of one run, with its
overrides) and the replays themselves (a replay is a run: agent_runs.replay; this row says of what)."""

from __future__ import annotations

import uuid

from django.db import models


class EvalSet(models.Model):
    set_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    name = models.TextField()
    description = models.TextField(blank=True, default="")
    created_by = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "eval_sets"
        ordering = ["name"]
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="eval_sets_one_name")]

    def __str__(self) -> str:
        return self.name


class EvalSetRun(models.Model):
    """A run kept in a set and where its replays fork. The run by value: a purged run leaves the
    set a member that says so, never blocks the purge."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    eval_set = models.ForeignKey(
        EvalSet, on_delete=models.CASCADE, db_column="set_id", related_name="members"
    )
    run_id = models.UUIDField()
    at_seq = models.BigIntegerField()
    added_by = models.TextField()
    added_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "eval_set_runs"
        ordering = ["added_at", "id"]
        constraints = [
            models.UniqueConstraint(fields=["eval_set", "run_id"], name="eval_set_runs_once"),
            models.CheckConstraint(condition=models.Q(at_seq__gte=1), name="eval_set_runs_seq_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}@{self.at_seq}"


class EvalRound(models.Model):
    """Replays started together with the same overrides: a set run again, or one run replayed."""

    round_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    eval_set = models.ForeignKey(
        EvalSet, null=True, blank=True, on_delete=models.CASCADE, db_column="set_id", related_name="rounds"
    )
    label = models.TextField(blank=True, default="")
    overrides = models.JSONField(default=dict)
    started_by = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "eval_rounds"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.label or str(self.round_id)


class RunReplay(models.Model):
    """What a replay run replays: the original, the seq it forked at, and the overrides it runs with
    (read by the step driver at every step of a run marked replay)."""

    run_id = models.UUIDField(primary_key=True)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    original_run_id = models.UUIDField()
    at_seq = models.BigIntegerField()
    eval_round = models.ForeignKey(
        EvalRound,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_column="round_id",
        related_name="replays",
    )
    overrides = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "run_replays"
        ordering = ["created_at"]
        indexes = [models.Index(fields=["tenant", "original_run_id"], name="run_replays_of_original")]

    def __str__(self) -> str:
        return f"replay {self.run_id} of {self.original_run_id}@{self.at_seq}"
