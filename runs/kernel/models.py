"""Durable runs: the materialized state (agent_runs), its event log (agent_events) and side effects.

The tables follow chapter 33. Every event bumps the run's state_revision and takes it as its seq,
so the projection always names the event it reflects. Only the kernel writes agent_runs and
agent_events (runs.kernel.apply, whose statements are in runs/kernel/_sql/); the ORM reads them and
serves the other tables.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from core.ids import uuid7


class RunStatus(models.TextChoices):
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_RUN_STATUSES = frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED})
TERMINAL_RUN_STATUSES = frozenset({RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED})
# The suspend reason of a run whose subject was erased: its content is redacted and it never continues.
SUBJECT_ERASED = "subject_erased"


class AgentRun(models.Model):
    # Time-ordered (core/ids.py): a new run's index entries go next to the last run's.
    run_id = models.UUIDField(primary_key=True, default=uuid7, editable=False)
    # Indexed by agent_runs_tenant_run_idx (tenant first, so it serves the foreign key too).
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id", db_index=False)
    workflow_name = models.TextField()
    workflow_version = models.TextField()
    state_schema_version = models.IntegerField()
    status = models.TextField(choices=RunStatus.choices, default=RunStatus.RUNNING)
    next_step = models.TextField(null=True, blank=True)
    state = models.JSONField()
    state_revision = models.BigIntegerField()
    # Digest of `state`, as committed with its last event: statements that add an event without
    # changing the state copy it from here (reading the previous event instead would race).
    state_digest = models.TextField(default="")
    # Suspension: a machine-readable code and a sentence for the human who must act.
    suspend_reason = models.TextField(null=True, blank=True)
    suspend_detail = models.TextField(blank=True, default="")
    # The output of a completed run, or {code, detail} of a failed one.
    result = models.JSONField(null=True, blank=True)
    # Lease with fencing: lease_epoch grows by one at every acquisition.
    lease_owner = models.TextField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    lease_epoch = models.BigIntegerField(default=0)
    # Attempts at next_step so far (crashes, errors and take-overs all count).
    attempt = models.IntegerField(default=0)
    # Not before this time (a retry backoff); the sweep and lease acquisition respect it.
    wake_at = models.DateTimeField(null=True, blank=True)
    # When the sweep last re-sent a wake-up, so it does not resend on every tick.
    dispatched_at = models.DateTimeField(null=True, blank=True)
    idempotency_key = models.TextField(null=True, blank=True)
    input_digest = models.TextField()
    # The three references to another run below are NULL for most runs, so each is indexed only where
    # it is set (Meta.indexes): a full index would take an entry for every run's insert and for every
    # update that cannot be HOT, all of them NULL.
    parent_run = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        db_column="parent_run_id",
        related_name="forks",
        db_index=False,
    )
    fork_seq = models.BigIntegerField(null=True, blank=True)
    # A fork nobody starts is cancelled after this time (orphan forks expire).
    fork_expires_at = models.DateTimeField(null=True, blank=True)
    # Rewind: the fork that replaced this run. The run itself is kept.
    superseded_by = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_column="superseded_by",
        related_name="+",
        db_index=False,
    )
    # A child run (ctx.start_child): the run that started it. Its finishing wakes that run (trigger
    # of migration 0019); cancelling that run cancels it. Forks use parent_run instead.
    child_of = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        db_column="child_of_run_id",
        related_name="children",
        db_index=False,
    )
    # Whom the run is about (a customer, a user): sessions and memory are keyed by it.
    subject = models.TextField(blank=True, default="")
    # A person (or an approval) asked a suspended run to continue; a worker verifies it first.
    resume_requested_at = models.DateTimeField(null=True, blank=True)
    resume_requested_by = models.TextField(blank=True, default="")
    # An imported history copy (operator import_history): read, export and fork it; it never runs,
    # and no lease, sweep, transition or message touches it. A state, not a sentinel lease owner.
    imported = models.BooleanField(default=False, db_default=False)
    # An evaluation's replay (runs/evaluation/): a fork that runs with overrides, whose side effects are
    # answered from the original's record; not the tenant's real work (charts, webhooks leave it out).
    replay = models.BooleanField(default=False, db_default=False)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "agent_runs"
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in RunStatus]), name="agent_runs_status_valid"
            ),
            models.CheckConstraint(
                condition=~Q(status=RunStatus.SUSPENDED) | Q(suspend_reason__isnull=False),
                name="agent_runs_suspended_has_reason",
            ),
            models.CheckConstraint(
                condition=~Q(status=RunStatus.RUNNING) | Q(next_step__isnull=False),
                name="agent_runs_running_has_next_step",
            ),
            models.CheckConstraint(
                condition=Q(lease_owner__isnull=True) | Q(lease_expires_at__isnull=False),
                name="agent_runs_lease_has_expiry",
            ),
            models.CheckConstraint(condition=Q(state_revision__gte=1), name="agent_runs_revision_positive"),
            models.CheckConstraint(condition=Q(lease_epoch__gte=0), name="agent_runs_epoch_nonnegative"),
            models.CheckConstraint(
                condition=Q(parent_run__isnull=True) | Q(fork_seq__isnull=False),
                name="agent_runs_fork_has_seq",
            ),
            models.CheckConstraint(
                condition=Q(resume_requested_at__isnull=True) | Q(status=RunStatus.SUSPENDED),
                name="agent_runs_resume_request_only_when_suspended",
            ),
            models.UniqueConstraint(
                fields=["tenant", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="agent_runs_tenant_idempotency_key",
            ),
        ]
        indexes = [
            # The sweep looks only at running runs (the active set stays small).
            models.Index(
                fields=["updated_at"], name="agent_runs_running_idx", condition=Q(status=RunStatus.RUNNING)
            ),
            models.Index(
                fields=["resume_requested_at"],
                name="agent_runs_resume_req_idx",
                condition=Q(resume_requested_at__isnull=False),
            ),
            # The console's run list: newest activity first, a keyset page per tenant (and per status).
            models.Index(fields=["tenant", "-updated_at", "-run_id"], name="agent_runs_tenant_updated_idx"),
            # The runs list's stable order (order=created): a walk that sees every run once.
            models.Index(fields=["tenant", "-created_at", "-run_id"], name="agent_runs_tenant_created_idx"),
            models.Index(
                fields=["tenant", "status", "-updated_at", "-run_id"], name="agent_runs_tenant_st_upd_idx"
            ),
            # A run named with its tenant (every statement of the kernel): both are index conditions
            # here. With an index on tenant_id alone the planner, which cannot tell that the explicit
            # tenant and row-level security's `tenant_id = ANY (...)` are one condition, could cost
            # reading all of a tenant's runs as cheap as the primary key's one row. Also one tenant's
            # runs by run_id (the run list sorted by tenant).
            models.Index(fields=["tenant", "run_id"], name="agent_runs_tenant_run_idx"),
            # The run list sorted by a column (RUN_ORDERS): the column, then run_id for ties.
            models.Index(fields=["tenant", "workflow_name", "run_id"], name="agent_runs_tenant_wf_idx"),
            models.Index(fields=["tenant", "subject", "run_id"], name="agent_runs_tenant_subject_idx"),
            # By status, then start (RUN_ORDERS); read backwards, one status's runs newest first (the
            # list filtered by status, in order of start).
            models.Index(
                fields=["tenant", "status", "created_at", "run_id"], name="agent_runs_tenant_st_cre_idx"
            ),
            # A run's forks, its children, the run that superseded it; and the foreign keys' checks
            # when a run is deleted (`= $1` implies NOT NULL, so these serve them).
            models.Index(
                fields=["parent_run"], name="agent_runs_parent_idx", condition=Q(parent_run__isnull=False)
            ),
            models.Index(
                fields=["child_of"], name="agent_runs_child_of_idx", condition=Q(child_of__isnull=False)
            ),
            models.Index(
                fields=["superseded_by"],
                name="agent_runs_superseded_by_idx",
                condition=Q(superseded_by__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.workflow_name} {self.run_id} ({self.status})"


class AgentEvent(models.Model):
    """An immutable fact about a run. (run_id, seq) is its identity; seq equals the revision it made.

    The table is partitioned by range of run_created_at, a month a partition (runs/partitions.py): the
    key is the run's creation time, so all of a run's events share one partition. Each unique key below
    carries it (PostgreSQL requires the partition key in every unique index) and stays as strict as
    without it, because run_created_at is a function of run_id; and retention drops a partition only
    when every run in it ended, which removes whole histories, never the start of one.
    """

    id = models.BigAutoField(primary_key=True)
    # No index of its own: the unique (run, seq) index starts with run_id and serves every look-up by
    # run; a second index would only cost each commit another write. No foreign key in the database
    # either: its check, a query per event at every commit, cost the server about 5% of a step's commit,
    # and it could only fail where the kernel is wrong. Every event is inserted by the statement that
    # updates (so locks) its run, and what deletes runs locks them first, so nothing writes an event
    # between a purge's delete of the events and of their run (runs/kernel/writer.py).
    run = models.ForeignKey(
        AgentRun,
        on_delete=models.CASCADE,
        db_column="run_id",
        related_name="events",
        db_index=False,
        db_constraint=False,
    )
    # The run's tenant, copied by the statement that writes the event: row-level security compares it.
    tenant_id = models.UUIDField()
    seq = models.BigIntegerField()
    event_type = models.TextField()
    step_id = models.TextField(null=True, blank=True)
    attempt = models.IntegerField(null=True, blank=True)
    payload = models.JSONField()
    actor = models.TextField()
    state_revision = models.BigIntegerField()
    state_digest = models.TextField()
    # The state and next step after this event, where it changed them: enough to rebuild the run
    # exactly at any seq (fork, rewind, audit). NULL means "as at the previous event".
    state = models.JSONField(null=True, blank=True)
    next_step = models.TextField(null=True, blank=True)
    # Conversation events carry the client's id for the message: appending it twice is a no-op.
    client_message_id = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField()
    # The partition key: agent_runs.created_at of the run, copied by the statement that writes the event.
    # The database's primary key is (id, run_created_at); id alone comes from one sequence and stays unique.
    run_created_at = models.DateTimeField()
    # Times the row was changed after it was written (erasure's redaction, or tampering): a trigger
    # (runs 0016) counts every change of payload, type or seq, so a summary of the range can tell
    # that it must check its source digest again without reading the range on every turn.
    rewrites = models.IntegerField(db_default=0)

    class Meta:
        db_table = "agent_events"
        ordering = ["run_id", "seq"]
        constraints = [
            models.UniqueConstraint(fields=["run", "seq", "run_created_at"], name="agent_events_run_seq"),
            models.UniqueConstraint(
                fields=["run", "client_message_id", "run_created_at"],
                condition=Q(client_message_id__isnull=False),
                name="agent_events_run_client_message",
            ),
            models.CheckConstraint(condition=Q(seq__gte=1), name="agent_events_seq_positive"),
            models.CheckConstraint(
                condition=Q(state_revision=models.F("seq")), name="agent_events_seq_is_revision"
            ),
        ]
        indexes = [
            # /metrics counts lease take-overs at every scrape: only these events, not the whole log.
            models.Index(
                fields=["run"], name="agent_events_resume_verified", condition=Q(event_type="resume_verified")
            ),
            # The context builder asks for a run's rewritten events on every turn: only those rows.
            models.Index(fields=["run", "seq"], name="agent_events_rewritten", condition=Q(rewrites__gt=0)),
        ]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.event_type}"


class OperationStatus(models.TextChoices):
    PREPARED = "prepared"
    STARTED = "started"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    UNKNOWN = "unknown"


class ToolOperation(models.Model):
    """One external side effect under the idempotent protocol (prepared → started → outcome).

    operation_id is stable across retries, resumes and forks (e.g. "refund:{order_id}"), and is
    the idempotency key the external system sees; it is unique per tenant.
    """

    id = models.BigAutoField(primary_key=True)
    operation_id = models.TextField()
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    run = models.ForeignKey(AgentRun, on_delete=models.PROTECT, db_column="run_id", related_name="operations")
    step_id = models.TextField()
    tool_name = models.TextField()
    tool_contract_version = models.TextField()
    request_digest = models.TextField()
    status = models.TextField(choices=OperationStatus.choices, default=OperationStatus.PREPARED)
    external_ref = models.TextField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    attempts = models.IntegerField(default=0)
    # Each protocol transition: {"status", "at", "by", "note"} (prepared, started, unknown, ...).
    history = models.JSONField(default=list)
    # When the last start's call has surely ended (started + the call's timeout): before it, a lookup's
    # "not applied" may describe a request still in flight, and is not trusted.
    call_deadline_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "tool_operations"
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "operation_id"], name="tool_operations_tenant_op"),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in OperationStatus]),
                name="tool_operations_status_valid",
            ),
            models.CheckConstraint(
                condition=~Q(status=OperationStatus.SUCCEEDED) | Q(external_ref__isnull=False),
                name="tool_operations_succeeded_has_ref",
            ),
        ]
        indexes = [
            models.Index(
                fields=["run", "status"],
                name="tool_operations_open_idx",
                condition=Q(status__in=[OperationStatus.STARTED, OperationStatus.UNKNOWN]),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.operation_id} ({self.status})"


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"


class Approval(models.Model):
    """A person's decision on one exact request, bound to it by digest and valid until expires_at.

    An approval whose digest no longer matches the run's request, or that expired before it was
    used, is never used: the run asks for a new one.
    """

    approval_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, db_column="run_id", related_name="approvals")
    step_id = models.TextField()
    request = models.JSONField()
    request_digest = models.TextField()
    # Why the decider asked (shown to the approver).
    reasons = models.JSONField(default=list)
    status = models.TextField(choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    expires_at = models.DateTimeField()
    decided_by = models.TextField(blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "approvals"
        ordering = ["-created_at"]
        # The approvals list's keyset pages (newest first, one tenant).
        indexes = [
            models.Index(
                fields=["tenant", "-created_at", "-approval_id"], name="approvals_tenant_created_idx"
            )
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in ApprovalStatus]), name="approvals_status_valid"
            ),
            models.CheckConstraint(
                condition=Q(status=ApprovalStatus.PENDING) | Q(decided_at__isnull=False),
                name="approvals_decided_has_time",
            ),
            models.UniqueConstraint(
                fields=["run"],
                condition=Q(status=ApprovalStatus.PENDING),
                name="approvals_one_pending_per_run",
            ),
        ]

    def __str__(self) -> str:
        return f"approval {self.approval_id} ({self.status})"


class SummaryStatus(models.TextChoices):
    VALID = "valid"
    STALE = "stale"
    # A fact of it says something else than its events (a flipped negation, a dropped condition or
    # currency): never used, kept for a person's review (runs/conversations/compaction/services.py).
    HELD = "held"


class Summary(models.Model):
    """A lossy, versioned cache of a continuous seq range of a run's events: never a source of truth.

    It is checked against its source (range and digest of the raw events) before every use and
    rebuilt from the raw events when its compactor changes.
    """

    summary_id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey("core.Tenant", on_delete=models.PROTECT, db_column="tenant_id")
    run = models.ForeignKey(AgentRun, on_delete=models.CASCADE, db_column="run_id", related_name="summaries")
    covers_from_seq = models.BigIntegerField()
    covers_to_seq = models.BigIntegerField()
    source_digest = models.TextField()
    compactor = models.JSONField()  # {prompt_version, model, schema_version}
    facts = models.JSONField(default=list)
    open_questions = models.JSONField(default=list)
    decisions = models.JSONField(default=list)
    # What must never live only in prose: unconfirmed tool calls, approvals, operation ids, money,
    # safety conditions and user constraints.
    carry = models.JSONField(default=dict)
    text = models.TextField()
    token_count = models.IntegerField()
    status = models.TextField(choices=SummaryStatus.choices, default=SummaryStatus.VALID)
    # The sum of agent_events.rewrites over the range when its digest was last checked: while the
    # sum is unchanged the raw events are the ones it was made from, and the builder trusts it
    # (-1: never checked, as for an imported summary: the first use checks it).
    rewrites_checked = models.BigIntegerField(default=-1)
    # Facts the compactor wrote that the events they cite do not support: dropped from the summary,
    # kept here (text, cited seqs, why) for the record.
    unsupported_facts = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "summaries"
        verbose_name_plural = "summaries"
        ordering = ["run_id", "covers_from_seq"]
        constraints = [
            models.CheckConstraint(
                condition=Q(covers_from_seq__gte=1) & Q(covers_from_seq__lte=models.F("covers_to_seq")),
                name="summaries_range_valid",
            ),
            models.CheckConstraint(
                condition=Q(status__in=[s.value for s in SummaryStatus]), name="summaries_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"summary {self.run_id} {self.covers_from_seq}..{self.covers_to_seq}"
