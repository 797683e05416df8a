"""apply(move): the only code that writes agent_runs and agent_events.

Each move is one statement (a bulk restore or purge, one transaction), fenced as the move says; what
the webhooks outbox and a waiting parent run need is derived from the move in that same statement.
Statements go through core.db.wire, which sets the bound tenant inside their own transaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, overload
from uuid import UUID

from django.conf import settings
from django.db import transaction

from core.db import wire
from core.digests import canonical_json
from core.tracing import traced
from runs.kernel import moves as m
from runs.kernel._sql import langgraph as lg
from runs.kernel._sql import leases, partitions, runs
from runs.kernel.models import AgentEvent, AgentRun, ToolOperation
from runs.kernel.params import TERMINAL, commit_params, json_loaded, json_or_none, webhook_params
from runs.kernel.records import Ending, LeaseGrant

R = TypeVar("R")
_Handler = Callable[[Any], Any]
_HANDLERS: dict[type, _Handler] = {}


def _handles(kind: type[m.Move[R]]) -> Callable[[Callable[[Any], R]], Callable[[Any], R]]:
    def register(handler: Callable[[Any], R]) -> Callable[[Any], R]:
        _HANDLERS[kind] = handler
        return handler

    return register


@overload
def apply(move: m.WorkerMove) -> int | Ending | None: ...  # a lease holder's move, whichever it is
@overload
def apply(move: m.Move[R]) -> R: ...
def apply(move: m.Move[Any]) -> Any:
    """Write the move, or nothing if its fence no longer holds (None / False / 0 / []: see the move)."""
    return _HANDLERS[type(move)](move)


# --- starting ---------------------------------------------------------------------------------------


@_handles(m.RunStarted)
def _run_started(move: m.RunStarted) -> tuple[Any, ...] | None:
    return _insert_run(move.columns).first_row_of(
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "workflow_name": move.workflow_name,
            "workflow_version": move.workflow_version,
            "schema": move.state_schema_version,
            "next_step": move.next_step,
            "state": move.state.json,
            "key": move.idempotency_key,
            "input_digest": move.input_digest,
            "parent": move.parent_run_id,
            "fork_seq": move.fork_seq,
            "fork_expires_at": move.fork_expires_at,
            "status": "suspended" if move.suspend_reason else "running",
            "suspend_reason": move.suspend_reason,
            "event_type": move.event_type,
            "payload": canonical_json(move.payload),
            "actor": move.actor,
            "digest": move.state.digest,
            "subject": move.subject,
            "replay": move.replay,
        }
    )


_INSERTS: dict[tuple[str, ...], wire.Statement] = {}


def _insert_run(columns: tuple[str, ...]) -> wire.Statement:
    """The run's insert returning these columns, prepared per connection like the step commit."""
    statement = _INSERTS.get(columns)
    if statement is None:
        sql = runs.INSERT_RUN.format(columns=", ".join(f'"{column}"' for column in columns))
        # Named by what it returns: the same name is the same statement in every thread and process.
        name = "keeper_insert_run_" + hashlib.sha256(",".join(columns).encode()).hexdigest()[:16]
        statement = _INSERTS.setdefault(columns, wire.Statement.named(name, sql, runs.INSERT_RUN_TYPES))
    return statement


# --- leases -----------------------------------------------------------------------------------------


@_handles(m.LeaseTaken)
def _lease_taken(move: m.LeaseTaken) -> LeaseGrant | None:
    found = leases.LEASE_TAKE.first_row_of(
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "owner": move.owner,
            "ttl": move.ttl,
            "external": move.external,
        },
    )
    if not found:
        return None
    (tenant_id, epoch, expires_at, revision, next_step, state, status, requested_by, wf_name, wf_version, schema,
     attempt, previous_owner, previous_epoch, child_of_run_id, replay) = found  # fmt: skip
    return LeaseGrant(
        run_id=move.run_id,
        tenant_id=tenant_id,
        owner=move.owner,
        epoch=epoch,
        expires_at=expires_at,
        revision=revision,
        next_step=next_step,
        state=json_loaded(state),
        status=status,
        resume_requested_by=requested_by,
        workflow_name=wf_name,
        workflow_version=wf_version,
        state_schema_version=schema,
        attempt=attempt,
        previous_owner=previous_owner,
        previous_epoch=previous_epoch,
        child_of_run_id=child_of_run_id,
        replay=replay,
    )


@_handles(m.LeaseRenewed)
def _lease_renewed(move: m.LeaseRenewed) -> datetime | None:
    found = leases.LEASE_RENEW.first_row_of(
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "owner": move.owner,
            "epoch": move.epoch,
            "ttl": move.ttl,
        },
    )
    return found[0] if found else None


@_handles(m.LeaseReleased)
def _lease_released(move: m.LeaseReleased) -> bool:
    params = {
        "run_id": move.run_id,
        "tenant_id": move.tenant_id,
        "owner": move.owner,
        "epoch": move.epoch,
        "delay": move.retry_in,
        "attempted": move.attempted,
    }
    return leases.LEASE_RELEASE.first_value_of(params) is not None


@_handles(m.LeaseDeferred)
def _lease_deferred(move: m.LeaseDeferred) -> bool:
    params = {
        "run_id": move.run_id,
        "tenant_id": move.tenant_id,
        "owner": move.owner,
        "epoch": move.epoch,
        "delay": move.retry_in,
    }
    return leases.LEASE_DEFER.first_value_of(params) is not None


@_handles(m.RunsRedispatched)
def _runs_redispatched(move: m.RunsRedispatched) -> list[UUID]:
    return [row[0] for row in wire.rows(leases.REDISPATCH_CLAIM, {"grace": move.grace, "limit": move.limit})]


# --- a lease holder's moves: the step commit ----------------------------------------------------------


def _commit_span(kw: dict[str, Any]) -> dict[str, Any]:
    params = kw["params"]
    return {
        "keeper.run_id": params["run_id"],
        "keeper.revision": params["expected"] + 1,
        "keeper.step": params["step_id"],
        "keeper.status": params["status"],
        "keeper.event_type": params["event_type"],
    }


@traced("keeper.commit", _commit_span)
def _commit_statement(*, params: dict[str, Any]) -> tuple[int, bool | None] | None:
    """The event's seq, and for a run that ends whether it answered a turn (None if not asked)."""
    if not settings.KEEPER_PREPARED_STATEMENTS:
        statement = runs.COMMIT_CALL  # the function picks the statement for the step's end
    elif params["status"] in TERMINAL:
        ended = runs.COMMIT_ENDS.first_row_of(params)
        return None if ended is None else (int(ended[0]), bool(ended[1]))
    else:
        statement = runs.COMMIT_OUTBOX if params["webhook"] else runs.COMMIT
    seq = statement.first_value_of(params)
    return None if seq is None else (int(seq), None)


def _commit(move: m.WorkerMove) -> int | Ending | None:
    params = commit_params(move)
    params.update(webhook_params(params["status"], params["suspend_reason"], json_loaded(params["result"])))
    written = _commit_statement(params=params)
    if written is None:
        return None
    seq, answered = written
    return Ending(seq, answered) if isinstance(move, m.Completed) else seq


for _kind in (m.StepCommitted, m.Suspended, m.Completed, m.Failed, m.StepErrored, m.ResumeVerified,
              m.ResumeRefused, m.StateMigrated):  # fmt: skip
    _HANDLERS[_kind] = _commit


# --- people and the system -----------------------------------------------------------------------------


@_handles(m.StatusChanged)
def _status_changed(move: m.StatusChanged) -> int | None:
    result_json = json_or_none(move.result)
    hook = webhook_params(move.to_status, move.suspend_reason, move.result)
    stays = move.to_status in move.from_statuses
    if stays and move.to_status in ("completed", "failed"):
        # A finished run that stays finished (a rewind supersedes it) was announced when it finished.
        hook = {**hook, "webhook": None}
    if move.to_status in TERMINAL and not stays:
        sql = runs.TRANSITION_ENDS
    else:
        sql = runs.TRANSITION_OUTBOX if hook["webhook"] else runs.TRANSITION
    found = wire.rows(
        sql,
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "from_statuses": list(move.from_statuses),
            "to_status": move.to_status,
            "event_type": move.event_type,
            "actor": move.actor,
            "payload": canonical_json(move.payload),
            "expected": move.expected_revision,
            "suspend_reason": move.suspend_reason,
            "suspend_detail": move.suspend_detail,
            "result": result_json,
            "next_step": move.next_step,
            "request_resume": move.request_resume,
            "superseded_by": move.superseded_by,
            "only_if_reason": move.only_if_reason,
            "only_if_fork_expired": move.only_if_fork_expired,
            "unless_resume_pending": move.unless_resume_pending,
            **hook,
        },
    )
    return found[0][0] if found else None


@_handles(m.StateAccepted)
def _state_accepted(move: m.StateAccepted) -> int | None:
    found = wire.rows(
        runs.ACCEPT_STATE,
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "expected": move.expected_revision,
            "reasons": list(move.reasons),
            "state": move.state.json,
            "digest": move.state.digest,
            "actor": move.actor,
            "detail": move.detail,
            "payload": canonical_json(move.payload),
        },
    )
    return found[0][0] if found else None


@_handles(m.ReconciliationCorrected)
def _reconciliation_corrected(move: m.ReconciliationCorrected) -> int | None:
    found = wire.rows(
        runs.RECONCILIATION_CORRECTED,
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "expected": move.expected_revision,
            "state": move.state.json,
            "digest": move.state.digest,
            "next_step": move.next_step,
            "detail": move.detail,
            "payload": canonical_json(move.payload),
            "actor": move.actor,
            "request_resume": move.request_resume,
        },
    )
    return found[0][0] if found else None


@_handles(m.SubjectErased)
def _subject_erased(move: m.SubjectErased) -> int | None:
    found = wire.rows(
        runs.SUBJECT_ERASED,
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "expected": move.expected_revision,
            "state": move.state.json,
            "digest": move.state.digest,
            "subject": move.subject,
            "result": json_or_none(move.result),
            "idempotency_key": move.idempotency_key,
            "detail": move.detail,
            "old_detail": move.old_detail,
            "payload": canonical_json(move.payload),
            "actor": move.actor,
        },
    )
    return found[0][0] if found else None


@_handles(m.WorkspaceMerged)
def _workspace_merged(move: m.WorkspaceMerged) -> int | None:
    found = wire.rows(
        runs.WORKSPACE_MERGED,
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "expected": move.expected_revision,
            "state": None if move.state is None else move.state.json,
            "digest": None if move.state is None else move.state.digest,
            "event_type": move.event_type,
            "payload": canonical_json(move.payload),
            "actor": move.actor,
            "wait": move.wait,
            "resume": move.resume,
            "detail": move.detail,
        },
    )
    return found[0][0] if found else None


# --- events that leave the state as it is -----------------------------------------------------------


@_handles(m.MessageAppended)
def _message_appended(move: m.MessageAppended) -> int | None:
    found = wire.rows(
        runs.APPEND_EVENT,
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "event_type": move.event_type,
            "payload": canonical_json(move.payload),
            "actor": move.actor,
            "client_message_id": move.client_message_id,
        },
    )
    return found[0][0] if found else None


@_handles(m.UsageCharged)
def _usage_charged(move: m.UsageCharged) -> int | None:
    found = wire.rows(
        runs.USAGE_CHARGED,
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "payload": canonical_json(move.payload),
            "actor": move.actor,
        },
    )
    return found[0][0] if found else None


@_handles(m.SignalDelivered)
def _signal_delivered(move: m.SignalDelivered) -> tuple[int, bool] | None:
    found = wire.rows(
        runs.SIGNAL_DELIVER,
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "waiting_detail": move.waiting_detail,
            "payload": canonical_json(move.payload),
            "actor": move.actor,
            "key": move.idempotency_key,
        },
    )
    return (found[0][0], bool(found[0][1])) if found else None


@_handles(m.ChildLinked)
def _child_linked(move: m.ChildLinked) -> bool:
    params = {"child": move.child_run_id, "parent": move.parent_run_id, "tenant": move.tenant_id}
    return bool(wire.rows(runs.CHILD_LINK, params))


@_handles(m.EventsCopied)
def _events_copied(move: m.EventsCopied) -> int:
    found = wire.rows(
        runs.EVENTS_COPY,
        {
            "run_id": move.run_id,
            "tenant": move.tenant_id,
            "source": move.source_run_id,
            "up_to": move.up_to_seq,
            "types": list(move.event_types),
        },
    )
    return int(found[0][0]) if found else 0


_REDACTABLE = frozenset({"payload", "state", "client_message_id", "actor"})


@_handles(m.EventRedacted)
def _event_redacted(move: m.EventRedacted) -> bool:
    unknown = set(move.changes) - _REDACTABLE
    if unknown:
        raise ValueError(f"erasure rewrites {sorted(_REDACTABLE)} of an event, not {sorted(unknown)}")
    return bool(AgentEvent.objects.filter(run_id=move.run_id, seq=move.seq).update(**move.changes))


@_handles(m.StateAlteredOutside)
def _state_altered(move: m.StateAlteredOutside) -> bool:
    params = {
        "run_id": move.run_id,
        "tenant_id": move.tenant_id,
        "state": json_or_none(move.state),
        "schema": move.state_schema_version,
    }
    return bool(wire.rows(runs.STATE_ALTERED, params))


# --- LangGraph threads --------------------------------------------------------------------------------


@_handles(m.CheckpointPut)
def _checkpoint_put(move: m.CheckpointPut) -> int | None:
    seq = lg.CHECKPOINT_PUT.first_value(
        [
            str(move.tenant_id).encode(),
            str(move.run_id).encode(),
            move.thread_id.encode(),
            move.checkpoint_ns.encode(),
            move.checkpoint_id.encode(),
            None if move.parent_checkpoint_id is None else move.parent_checkpoint_id.encode(),
            move.checkpoint_json.encode(),
            move.metadata_json.encode(),
            move.blob_index_json.encode(),
            wire.bytea_array(move.blobs),
            None if move.payload_json is None else move.payload_json.encode(),
            move.actor.encode(),
        ]
    )
    return None if seq is None else int(seq)


@_handles(m.InterruptAsked)
def _interrupt_asked(move: m.InterruptAsked) -> bool:
    params = {
        **move.writes,
        "tenant": move.tenant_id,
        "run": move.run_id,
        "detail": move.detail,
        "payload": canonical_json(move.payload),
        "actor": move.actor,
    }
    with transaction.atomic():
        wire.rows(lg.LOCK_RUN, params)
        found = wire.rows(lg.INTERRUPT_ASKED, params)
    return bool(found and found[0][0])


@_handles(m.InterruptAnswered)
def _interrupt_answered(move: m.InterruptAnswered) -> int | None:
    found = wire.rows(
        lg.INTERRUPT_ANSWERED,
        {
            "run_id": move.run_id,
            "tenant_id": move.tenant_id,
            "expected": move.expected_revision,
            "reason": move.reason,
            "detail": move.detail,
            "payload": canonical_json(move.payload),
            "actor": move.actor,
        },
    )
    return found[0][0] if found else None


@_handles(m.ThreadDeleted)
def _thread_deleted(move: m.ThreadDeleted) -> bool:
    params = {"tenant": move.tenant_id, "thread": move.thread_id, "key": move.thread_key}
    # The run is locked by a statement of its own before the delete: the delete's snapshot then holds
    # every event a put committed before the lock, and a put after it finds no run (see _runs_purged).
    with transaction.atomic():
        wire.rows(lg.THREAD_RUN_LOCKED, params)
        return bool(wire.rows(lg.THREAD_DELETED, params))


# --- operators ------------------------------------------------------------------------------------------


@_handles(m.HistoryImported)
def _history_imported(move: m.HistoryImported) -> int:
    for event in move.events:  # the partition key: its run's creation time, as every statement writes it
        event.run_created_at = move.run.created_at
    with transaction.atomic():
        AgentRun.objects.bulk_create([move.run])
        AgentEvent.objects.bulk_create(move.events)
    return len(move.events)


@_handles(m.RunsPurged)
def _runs_purged(move: m.RunsPurged) -> dict[str, int]:
    """Operations first (tool_operations.run_id is PROTECT: their effects are money); the rest cascade.

    The runs are locked first, by a statement of their own. An event is only ever written by a
    statement that updates its run, so one written to a purged run meanwhile (a usage charge after it
    ended) was committed before the lock, and the deletes after it see it; or it waits for the purge
    and then finds no run. agent_events has no foreign key that would catch an event left behind.
    """
    with transaction.atomic():
        purged = list(
            AgentRun.objects.select_for_update()
            .filter(run_id__in=move.run_ids, status__in=move.statuses)
            .order_by("run_id")
            .values_list("run_id", flat=True)
        )
        operations, _ = ToolOperation.objects.filter(run_id__in=purged).delete()
        _, per_model = AgentRun.objects.filter(run_id__in=purged).delete()
    return {**per_model, ToolOperation._meta.label: operations}


# --- monthly partitions (agent_events, webhook_deliveries, console_audit_log) ----------------------------


@_handles(m.PartitionsMade)
def _partitions_made(move: m.PartitionsMade) -> list[tuple[str, datetime, datetime, int]]:
    found = wire.rows(
        partitions.ENSURE, {"table": move.table, "since": move.since, "ahead": move.months_ahead}
    )
    return [(name, start, end, int(moved)) for name, start, end, moved in found]


@_handles(m.PartitionDropped)
def _partition_dropped(move: m.PartitionDropped) -> tuple[str, int]:
    found = wire.rows(
        partitions.DROP,
        {"table": move.table, "partition": move.partition, "cutoff": move.cutoff, "dry_run": move.dry_run},
        using="owner" if move.as_owner else "default",
    )
    return str(found[0][0]), int(found[0][1])
