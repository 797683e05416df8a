"""All SQL of the durable core, in one place: run creation, leases, commit_step, transitions, sweep.

Each write is one statement (one round trip), sent through Django's connection as a prepared
statement. A statement that matches no row changes nothing, and the caller learns why from
what came back. Services call these; nothing else writes agent_runs or agent_events.
Times are statement_timestamp(), not now(): inside a longer transaction now() stands still, and a
lease must expire by the clock.

Over 400 lines on purpose: every SQL statement of the durable core lives here and nowhere else,
so that the one-statement commit, the lease and the sweep are reviewed in one file.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from django.conf import settings
from django.db import connection

from core.tracing import traced
from runs.engine import wire


def _rows(sql: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold is None and settings.KEEPER_PREPARED_STATEMENTS:
        # Django turns automatic preparation off; keep it off for the ORM (a threshold never
        # reached) but let these statements, which run on every step, be prepared explicitly.
        raw.prepare_threshold = 2**31
    with connection.wrap_database_errors:
        cursor = psycopg.Cursor(raw).execute(sql, params, prepare=settings.KEEPER_PREPARED_STATEMENTS)
        return cursor.fetchall() if cursor.description else []


def _json(value: Any) -> Any:
    # Django registers jsonb to load as text on its connections; decode here.
    return json.loads(value) if isinstance(value, str | bytes) else value


# --- runs -------------------------------------------------------------------------------------

_INSERT_RUN = """
WITH r AS (
  INSERT INTO agent_runs (run_id, tenant_id, workflow_name, workflow_version, state_schema_version,
                          status, next_step, state, state_revision, suspend_detail, lease_epoch,
                          attempt, idempotency_key, input_digest, parent_run_id, fork_seq, fork_expires_at,
                          suspend_reason, resume_requested_by, subject, state_digest, created_at, updated_at)
  VALUES (%(run_id)s, %(tenant_id)s, %(workflow_name)s, %(workflow_version)s, %(schema)s,
          %(status)s, %(next_step)s, %(state)s::jsonb, 1, '', 0, 0, %(key)s, %(input_digest)s,
          %(parent)s, %(fork_seq)s, %(fork_expires_at)s, %(suspend_reason)s, '', %(subject)s, %(digest)s,
          statement_timestamp(), statement_timestamp())
  ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
  RETURNING *),
e AS (
  INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                            state_revision, state_digest, state, next_step, created_at)
  SELECT run_id, tenant_id, state_revision, %(event_type)s, NULL, NULL, %(payload)s::jsonb, %(actor)s,
         state_revision, %(digest)s, %(state)s::jsonb, %(next_step)s, statement_timestamp() FROM r)
SELECT {columns} FROM r
"""


def insert_run(
    *,
    run_id: UUID,
    tenant_id: UUID,
    workflow_name: str,
    workflow_version: str,
    state_schema_version: int,
    next_step: str,
    state_json: str,
    state_digest: str,
    idempotency_key: str | None,
    input_digest: str,
    payload_json: str,
    actor: str,
    parent_run_id: UUID | None = None,
    fork_seq: int | None = None,
    fork_expires_at: datetime | None = None,
    event_type: str = "run_started",
    suspend_reason: str | None = None,
    subject: str = "",
    columns: Sequence[str] = ("run_id",),
) -> tuple[Any, ...] | None:
    """Insert the run and its first event; the new row's `columns` (as stored, in one round trip),
    or None if the tenant already used the idempotency key.

    A run is inserted `running`, or `suspended` when a suspend reason is given (a fork not started).
    """
    rows = _rows(
        _INSERT_RUN.format(columns=", ".join(f'"{column}"' for column in columns)),
        {
            "run_id": run_id,
            "tenant_id": tenant_id,
            "workflow_name": workflow_name,
            "workflow_version": workflow_version,
            "schema": state_schema_version,
            "next_step": next_step,
            "state": state_json,
            "key": idempotency_key,
            "input_digest": input_digest,
            "parent": parent_run_id,
            "fork_seq": fork_seq,
            "fork_expires_at": fork_expires_at,
            "status": "suspended" if suspend_reason else "running",
            "suspend_reason": suspend_reason,
            "event_type": event_type,
            "payload": payload_json,
            "actor": actor,
            "digest": state_digest,
            "subject": subject,
        },
    )
    return rows[0] if rows else None


# --- leases -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LeaseGrant:
    run_id: UUID
    tenant_id: UUID
    owner: str
    epoch: int
    expires_at: datetime
    revision: int
    next_step: str
    state: dict[str, Any]
    status: str
    resume_requested_by: str
    workflow_name: str
    workflow_version: str
    state_schema_version: int
    attempt: int
    previous_owner: str | None
    previous_epoch: int
    child_of_run_id: UUID | None = None  # a child run: its parent may wait for it to finish


# The old owner comes from the locked row in FROM (RETURNING shows only new values before PG 18).
_LEASE_ACQUIRE = """
UPDATE agent_runs r
   SET lease_owner = %(owner)s,
       lease_expires_at = statement_timestamp() + make_interval(secs => %(ttl)s),
       lease_epoch = r.lease_epoch + 1,
       attempt = r.attempt + 1,
       wake_at = NULL
  FROM (SELECT run_id, lease_owner, lease_epoch FROM agent_runs WHERE run_id = %(run_id)s FOR UPDATE) old
 WHERE r.run_id = old.run_id
   AND (r.status = 'running' OR (r.status = 'suspended' AND r.resume_requested_at IS NOT NULL))
   AND NOT r.imported
   AND (r.lease_owner IS NULL OR r.lease_expires_at < statement_timestamp())
   AND (r.wake_at IS NULL OR r.wake_at <= statement_timestamp())
   -- an external workflow's runs go to outside workers only (runs/external/), all others to Keeper's
   AND %(external)s = EXISTS (SELECT 1 FROM external_workflows w WHERE w.tenant_id = r.tenant_id
                               AND w.name = r.workflow_name AND w.version = r.workflow_version)
RETURNING r.tenant_id, r.lease_epoch, r.lease_expires_at, r.state_revision, r.next_step, r.state,
          r.status, r.resume_requested_by, r.workflow_name, r.workflow_version, r.state_schema_version, r.attempt,
          old.lease_owner, old.lease_epoch, r.child_of_run_id
"""


def lease_acquire(*, run_id: UUID, owner: str, ttl: float, external: bool = False) -> LeaseGrant | None:
    """Take the run if it is running (or suspended with a resume request), unleased or expired, and due.

    The epoch grows by one. A suspended run taken this way must pass resume verification first.
    Keeper's workers take only runs of workflows in code; outside workers (`external`) only the others.
    """
    rows = _rows(_LEASE_ACQUIRE, {"run_id": run_id, "owner": owner, "ttl": ttl, "external": external})
    if not rows:
        return None
    (
        tenant_id,
        epoch,
        expires_at,
        revision,
        next_step,
        state,
        status,
        resume_requested_by,
        wf_name,
        wf_version,
        schema,
        attempt,
        previous_owner,
        previous_epoch,
        child_of_run_id,
    ) = rows[0]
    return LeaseGrant(
        run_id=run_id,
        tenant_id=tenant_id,
        owner=owner,
        epoch=epoch,
        expires_at=expires_at,
        revision=revision,
        next_step=next_step,
        state=_json(state),
        status=status,
        resume_requested_by=resume_requested_by,
        workflow_name=wf_name,
        workflow_version=wf_version,
        state_schema_version=schema,
        attempt=attempt,
        previous_owner=previous_owner,
        previous_epoch=previous_epoch,
        child_of_run_id=child_of_run_id,
    )


# The claimable runs of a tenant's external workflows, oldest activity first; lease_acquire decides.
_EXTERNAL_CLAIMABLE = """
SELECT r.run_id FROM agent_runs r
  JOIN external_workflows w
    ON w.tenant_id = r.tenant_id AND w.name = r.workflow_name AND w.version = r.workflow_version
 WHERE r.tenant_id = %(tenant_id)s AND r.workflow_name = ANY(%(names)s)
   AND (r.status = 'running' OR (r.status = 'suspended' AND r.resume_requested_at IS NOT NULL))
   AND NOT r.imported
   AND (r.lease_owner IS NULL OR r.lease_expires_at < statement_timestamp())
   AND (r.wake_at IS NULL OR r.wake_at <= statement_timestamp())
 ORDER BY r.updated_at
 LIMIT %(limit)s
"""


def external_claimable(*, tenant_id: UUID, names: Sequence[str], limit: int) -> list[UUID]:
    """Runs of these external workflows an outside worker could lease now (a race may still lose them)."""
    return [
        row[0]
        for row in _rows(_EXTERNAL_CLAIMABLE, {"tenant_id": tenant_id, "names": list(names), "limit": limit})
    ]


_LEASE_RENEW = """
UPDATE agent_runs SET lease_expires_at = statement_timestamp() + make_interval(secs => %(ttl)s)
 WHERE run_id = %(run_id)s AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
RETURNING lease_expires_at
"""


def lease_renew(*, run_id: UUID, owner: str, epoch: int, ttl: float) -> datetime | None:
    """Extend a lease still held at this epoch; None if it was lost (taken over, cancelled...)."""
    rows = _rows(_LEASE_RENEW, {"run_id": run_id, "owner": owner, "epoch": epoch, "ttl": ttl})
    return rows[0][0] if rows else None


_LEASE_RELEASE = """
UPDATE agent_runs SET lease_owner = NULL, lease_expires_at = NULL,
       wake_at = statement_timestamp() + make_interval(secs => %(delay)s)
 WHERE run_id = %(run_id)s AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s
RETURNING run_id
"""


def lease_release(*, run_id: UUID, owner: str, epoch: int, retry_in: float = 0.0) -> bool:
    """Give the run back without an event (nothing happened that history needs to know)."""
    return bool(_rows(_LEASE_RELEASE, {"run_id": run_id, "owner": owner, "epoch": epoch, "delay": retry_in}))


# --- webhooks: the outbox rows of an event, written by the statement that writes the event ---------

# Added to the commit and transition statements: one row per subscription of the run's tenant to this
# event type (runs/webhooks/). Only an event a subscriber can hear of runs the statement with this
# clause (most commits run it as before); a tenant with no subscription then costs one index probe.
# The event id is the same for every subscription of one event.
_WEBHOOK_OUTBOX = """
, outbox AS (
  INSERT INTO webhook_deliveries (tenant_id, subscription_id, event_id, event_type, run_id, data, status,
                                  attempts, next_attempt_at, last_error, history, created_at)
  SELECT u.tenant_id, s.id, md5(u.run_id::text || ':' || u.state_revision::text)::uuid, %(webhook)s::text,
         u.run_id, jsonb_build_object('status', %(webhook_status)s::text, 'reason', %(webhook_reason)s::text,
                                      'revision', u.state_revision),
         'pending', 0, statement_timestamp(), '', '[]'::jsonb, statement_timestamp()
    FROM u JOIN webhook_subscriptions s ON s.tenant_id = u.tenant_id AND s.deleted_at IS NULL
   WHERE %(webhook)s::text = ANY(s.event_types))
"""

# The suspend reasons a subscriber hears about, and the event type each becomes.
_WEBHOOK_SUSPENSIONS = {
    "approval_required": "run.suspended.approval",
    "reconciliation_required": "run.suspended.reconciliation",
}


def webhook_event_type(*, status: str, suspend_reason: str | None) -> str | None:
    """The webhook event type of a run entering `status` (None: no subscriber is told)."""
    if status == "suspended":
        return _WEBHOOK_SUSPENSIONS.get(suspend_reason or "")
    return {"completed": "run.completed", "failed": "run.failed"}.get(str(status))


def _with_outbox(sql: str) -> str:
    """The statement with the outbox clause after its `u` CTE (used only for an event subscribers hear
    of, so every other commit runs the statement exactly as it was)."""
    head, tail = sql.split("\nINSERT INTO agent_events", 1)
    return head + _WEBHOOK_OUTBOX + "INSERT INTO agent_events" + tail


def _webhook_params(
    status: str, suspend_reason: str | None, result_json: str | None = None
) -> dict[str, Any]:
    hook = webhook_event_type(status=status, suspend_reason=suspend_reason)
    reason = suspend_reason
    if hook == "run.failed" and reason is None and result_json:  # a failure's reason is its code
        failure = json.loads(result_json)
        reason = failure.get("code") if isinstance(failure, dict) else None
    return {"webhook": hook, "webhook_status": str(status), "webhook_reason": reason}


# --- commit_step --------------------------------------------------------------------------------

_COMMIT_STEP = """
WITH u AS (
  UPDATE agent_runs
     SET state = %(state)s::jsonb, state_digest = %(digest)s, next_step = %(next_step)s, status = %(status)s,
         suspend_reason = %(suspend_reason)s, suspend_detail = %(suspend_detail)s,
         result = %(result)s::jsonb,
         state_revision = state_revision + 1,
         -- updated_at is indexed three times: while a run steps on in the same status it moves at most
         -- once a second, so most commits are HOT updates (no index entries written; the live pages
         -- also watch state_revision, and a change of status always moves it)
         updated_at = CASE WHEN status IS DISTINCT FROM %(status)s::text
                             OR updated_at < statement_timestamp() - interval '1 second'
                           THEN statement_timestamp() ELSE updated_at END,
         -- a holder that keeps the lease starts the next step's first attempt under it
         attempt = CASE WHEN NOT %(reset_attempt)s THEN attempt WHEN %(release)s THEN 0 ELSE 1 END,
         lease_owner = CASE WHEN %(release)s THEN NULL ELSE lease_owner END,
         lease_expires_at = CASE WHEN %(release)s THEN NULL ELSE lease_expires_at END,
         wake_at = CASE WHEN %(release)s AND %(retry_in)s > 0
                        THEN statement_timestamp() + make_interval(secs => %(retry_in)s) ELSE NULL END,
         resume_requested_at = CASE WHEN %(resume_at_wake)s THEN statement_timestamp() ELSE NULL END,
         resume_requested_by = CASE WHEN %(resume_at_wake)s THEN 'timer' ELSE '' END,
         state_schema_version = COALESCE(%(schema)s::int, state_schema_version)
   WHERE run_id = %(run_id)s AND state_revision = %(expected)s AND lease_epoch = %(epoch)s
     AND lease_owner = %(owner)s AND status IN ('running', 'suspended')
  RETURNING run_id, tenant_id, state_revision)
INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                          state_revision, state_digest, state, next_step, created_at)
SELECT run_id, tenant_id, state_revision, %(event_type)s, %(step_id)s, %(attempt)s, %(payload)s::jsonb,
       %(owner)s, state_revision, %(digest)s, CASE WHEN %(event_state)s THEN %(state)s::jsonb END,
       %(next_step)s, statement_timestamp() FROM u
RETURNING seq
"""
_COMMIT_STEP_OUTBOX = _with_outbox(_COMMIT_STEP)
# The commit runs on every step: sent through libpq as they are (runs.engine.wire), its parameters
# typed here rather than adapted one by one.
_COMMIT_TYPES = {
    "run_id": wire.UUID,
    "expected": wire.INT8,
    "epoch": wire.INT8,
    "owner": wire.TEXT,
    "state": wire.TEXT,
    "digest": wire.TEXT,
    "next_step": wire.TEXT,
    "status": wire.TEXT,
    "event_type": wire.TEXT,
    "step_id": wire.TEXT,
    "attempt": wire.INT4,
    "payload": wire.TEXT,
    "suspend_reason": wire.TEXT,
    "suspend_detail": wire.TEXT,
    "result": wire.TEXT,
    "release": wire.BOOL,
    "reset_attempt": wire.BOOL,
    "retry_in": wire.FLOAT8,
    "schema": wire.INT4,
    "event_state": wire.BOOL,
    "resume_at_wake": wire.BOOL,
    "webhook": wire.TEXT,
    "webhook_status": wire.TEXT,
    "webhook_reason": wire.TEXT,
}
_COMMIT = wire.Statement.named("keeper_commit_step", _COMMIT_STEP, _COMMIT_TYPES)
_COMMIT_OUTBOX = wire.Statement.named("keeper_commit_step_outbox", _COMMIT_STEP_OUTBOX, _COMMIT_TYPES)


def _commit_span(kw: dict[str, Any]) -> dict[str, Any]:
    return {
        "keeper.run_id": kw["run_id"],
        "keeper.revision": kw["expected_revision"] + 1,
        "keeper.step": kw.get("step_id"),
        "keeper.status": kw["status"],
        "keeper.event_type": kw["event_type"],
    }


@traced("keeper.commit", _commit_span)
def commit_step(
    *,
    run_id: UUID,
    expected_revision: int,
    epoch: int,
    owner: str,
    state_json: str,
    state_digest: str,
    next_step: str | None,
    status: str,
    event_type: str,
    step_id: str | None,
    attempt: int | None,
    payload_json: str,
    suspend_reason: str | None = None,
    suspend_detail: str = "",
    result_json: str | None = None,
    release: bool = True,
    reset_attempt: bool = True,
    retry_in: float = 0.0,
    state_schema_version: int | None = None,
    event_state: bool = True,
    resume_at_wake: bool = False,
) -> int | None:
    """Write the new state and its event atomically; the new seq, or None if nothing matched.

    With `resume_at_wake` (a durable timer) a suspended run asks to be resumed by "timer" once
    `retry_in` seconds have passed: the sweep and lease_acquire leave it alone until then.

    The lease holder may commit a running run, or a suspended one it took to verify a resume.
    Without `release` the holder keeps the lease to run the next step in the same slice; that step
    counts as its first attempt, so a crash in it is counted like one after a fresh acquisition.
    Without `event_state` the event keeps no copy of the state (a refusal whose digest is not the
    stored state's: the state it names is the one an earlier event holds).
    """
    hook = _webhook_params(status, suspend_reason, result_json)
    seq = (_COMMIT_OUTBOX if hook["webhook"] else _COMMIT).first_value_of(
        {
            "run_id": run_id,
            "expected": expected_revision,
            "epoch": epoch,
            "owner": owner,
            "state": state_json,
            "digest": state_digest,
            "next_step": next_step,
            "status": status,
            "event_type": event_type,
            "step_id": step_id,
            "attempt": attempt,
            "payload": payload_json,
            "suspend_reason": suspend_reason,
            "suspend_detail": suspend_detail,
            "result": result_json,
            "release": release,
            "reset_attempt": reset_attempt,
            "retry_in": retry_in,
            "schema": state_schema_version,
            "event_state": event_state,
            "resume_at_wake": resume_at_wake,
            **hook,
        },
    )
    return None if seq is None else int(seq)


# --- transitions by people and operators --------------------------------------------------------

_TRANSITION = """
WITH u AS (
  UPDATE agent_runs
     SET status = %(to_status)s,
         -- staying suspended keeps the reason unless a new one is given
         suspend_reason = CASE WHEN %(to_status)s::text = 'suspended'
                               THEN COALESCE(%(suspend_reason)s, suspend_reason) END,
         suspend_detail = CASE WHEN %(to_status)s::text = 'suspended'
                               THEN COALESCE(%(suspend_detail)s, suspend_detail) ELSE '' END,
         result = COALESCE(%(result)s::jsonb, result),
         next_step = COALESCE(%(next_step)s, next_step),
         state_revision = state_revision + 1, updated_at = statement_timestamp(), attempt = 0,
         lease_owner = NULL, lease_expires_at = NULL, wake_at = NULL, dispatched_at = NULL,
         resume_requested_at = CASE WHEN %(request_resume)s THEN statement_timestamp() ELSE NULL END,
         resume_requested_by = CASE WHEN %(request_resume)s THEN %(actor)s ELSE '' END,
         superseded_by = COALESCE(%(superseded_by)s::uuid, superseded_by)
   WHERE run_id = %(run_id)s AND status = ANY(%(from_statuses)s)
     AND (%(expected)s::bigint IS NULL OR state_revision = %(expected)s::bigint)
     AND (%(only_if_reason)s::text IS NULL OR suspend_reason = %(only_if_reason)s::text)
     AND (NOT %(only_if_fork_expired)s
          OR (resume_requested_at IS NULL AND fork_expires_at < statement_timestamp()))
     AND NOT imported
     -- nothing asks a run whose subject was erased to continue (a resume, an approval, a message)
     AND NOT (%(request_resume)s AND suspend_reason IS NOT DISTINCT FROM 'subject_erased')
     -- a person's resume asked again before a worker verified the first changes nothing
     AND NOT (%(unless_resume_pending)s AND resume_requested_at IS NOT NULL)
  RETURNING run_id, tenant_id, state_revision, next_step, state_digest)
INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                          state_revision, state_digest, next_step, created_at)
SELECT u.run_id, u.tenant_id, u.state_revision, %(event_type)s, NULL, NULL, %(payload)s::jsonb, %(actor)s,
       u.state_revision, u.state_digest, u.next_step, statement_timestamp()
  FROM u
RETURNING seq
"""
_TRANSITION_OUTBOX = _with_outbox(_TRANSITION)


def transition(
    *,
    run_id: UUID,
    from_statuses: Sequence[str],
    to_status: str,
    event_type: str,
    actor: str,
    payload_json: str,
    expected_revision: int | None = None,
    suspend_reason: str | None = None,
    suspend_detail: str | None = None,
    result_json: str | None = None,
    next_step: str | None = None,
    request_resume: bool = False,
    superseded_by: UUID | None = None,
    only_if_reason: str | None = None,
    only_if_fork_expired: bool = False,
    unless_resume_pending: bool = False,
) -> int | None:
    """Move a run between statuses with an event, fencing out any worker that holds it.

    `only_if_fork_expired` re-checks in the statement that a fork is still unstarted (no resume
    request) and past its expiry. An imported run (it never runs here) matches no transition.

    With `request_resume` the run stays suspended and is marked for a worker to verify and resume.

    The state does not change, so the event carries the run's current state digest. None if
    the run was not in one of `from_statuses` (or not at `expected_revision`).
    """
    hook = _webhook_params(to_status, suspend_reason, result_json)
    if to_status in from_statuses and to_status in ("completed", "failed"):
        # A finished run that stays finished (a rewind supersedes it) was announced when it finished.
        hook = {**hook, "webhook": None}
    rows = _rows(
        _TRANSITION_OUTBOX if hook["webhook"] else _TRANSITION,
        {
            "run_id": run_id,
            "from_statuses": list(from_statuses),
            "to_status": to_status,
            "event_type": event_type,
            "actor": actor,
            "payload": payload_json,
            "expected": expected_revision,
            "suspend_reason": suspend_reason,
            "suspend_detail": suspend_detail,
            "result": result_json,
            "next_step": next_step,
            "request_resume": request_resume,
            "superseded_by": superseded_by,
            "only_if_reason": only_if_reason,
            "only_if_fork_expired": only_if_fork_expired,
            "unless_resume_pending": unless_resume_pending,
            **hook,
        },
    )
    return rows[0][0] if rows else None


_ACCEPT_STATE = """
WITH u AS (
  UPDATE agent_runs
     SET state_digest = %(digest)s, state_revision = state_revision + 1, updated_at = statement_timestamp(),
         suspend_reason = 'state_accepted', suspend_detail = %(detail)s, attempt = 0,
         lease_owner = NULL, lease_expires_at = NULL, wake_at = NULL, dispatched_at = NULL
   WHERE run_id = %(run_id)s AND status = 'suspended' AND state_revision = %(expected)s
     AND suspend_reason = ANY(%(reasons)s) AND state = %(state)s::jsonb
     AND (lease_owner IS NULL OR lease_expires_at < statement_timestamp()) AND NOT imported
  RETURNING run_id, tenant_id, state_revision, next_step)
INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                          state_revision, state_digest, state, next_step, created_at)
SELECT run_id, tenant_id, state_revision, 'state_accepted', NULL, NULL, %(payload)s::jsonb, %(actor)s,
       state_revision, %(digest)s, %(state)s::jsonb, next_step, statement_timestamp() FROM u
RETURNING seq
"""


def state_accept(
    *,
    run_id: UUID,
    expected_revision: int,
    reasons: Sequence[str],
    state_json: str,
    state_digest: str,
    actor: str,
    detail: str,
    payload_json: str,
) -> int | None:
    """Record that a person accepted the run's stored state as it is (digest and a copy in the event).

    Only while the run is still suspended for one of `reasons`, at `expected_revision`, unleased, and
    its state is still exactly `state_json`; None otherwise. It stays suspended (`state_accepted`).
    """
    rows = _rows(
        _ACCEPT_STATE,
        {
            "run_id": run_id,
            "expected": expected_revision,
            "reasons": list(reasons),
            "state": state_json,
            "digest": state_digest,
            "actor": actor,
            "detail": detail,
            "payload": payload_json,
        },
    )
    return rows[0][0] if rows else None


# --- conversation events ------------------------------------------------------------------------

_APPEND_EVENT = """
WITH u AS (
  UPDATE agent_runs SET state_revision = state_revision + 1, updated_at = statement_timestamp()
   WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status IN ('running', 'suspended')
     AND NOT imported
     AND suspend_reason IS DISTINCT FROM 'subject_erased'
  RETURNING run_id, tenant_id, state_revision, next_step, state_digest)
INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor, state_revision,
                          state_digest, next_step, client_message_id, created_at)
SELECT u.run_id, u.tenant_id, u.state_revision, %(event_type)s, NULL, NULL, %(payload)s::jsonb, %(actor)s,
       u.state_revision, u.state_digest, u.next_step, %(client_message_id)s, statement_timestamp()
  FROM u
RETURNING seq
"""


def append_event(
    *, run_id: UUID, tenant_id: UUID, event_type: str, payload_json: str, actor: str, client_message_id: str
) -> int | None:
    """Append an event that does not change the state (a message, a tool result) to an active run.

    It takes the next revision like every event, so a worker mid-step is fenced out and reruns the
    step with the new input. None if the run is not active (or not this tenant's). A client message
    id used before on this run raises IntegrityError and the whole statement is undone.
    """
    rows = _rows(
        _APPEND_EVENT,
        {
            "run_id": run_id,
            "tenant_id": tenant_id,
            "event_type": event_type,
            "payload": payload_json,
            "actor": actor,
            "client_message_id": client_message_id,
        },
    )
    return rows[0][0] if rows else None


# --- the sweep ----------------------------------------------------------------------------------

# Across tenants: through the SECURITY DEFINER function of migration 0008, which marks the runs
# dispatched and returns only their ids and tenants (row-level security hides the rows otherwise).
_CLAIM_FOR_REDISPATCH = "SELECT run_id, tenant_id FROM keeper_redispatch_claim(%(grace)s, %(limit)s)"


def claim_for_redispatch(*, grace: float, limit: int) -> list[UUID]:
    """Runs that should be moving and are not: mark them dispatched now and return their ids.

    Rows a worker is committing right now are locked and skipped; they are alive.
    """
    return [row[0] for row in _rows(_CLAIM_FOR_REDISPATCH, {"grace": grace, "limit": limit})]


# --- tool operations: the idempotent side-effect protocol ---------------------------------------


@dataclass(frozen=True)
class OperationRow:
    operation_id: str
    run_id: UUID
    status: str
    request_digest: str
    tool_contract_version: str
    external_ref: str | None
    result: Any
    attempts: int


_OP_COLUMNS = (
    "operation_id, run_id, status, request_digest, tool_contract_version, external_ref, result, attempts"
)


def _op(row: tuple[Any, ...]) -> OperationRow:
    op_id, run_id, status, digest, contract, ref, result, attempts = row
    return OperationRow(op_id, run_id, status, digest, contract, ref, _json(result), attempts)


def _history_entry(status: str) -> str:
    return (
        "jsonb_build_array(jsonb_build_object('status', " + status + ", 'at', statement_timestamp(), "
        "'by', %(actor)s::text, 'note', %(note)s::text))"
    )


_OP_PREPARE = f"""
WITH ins AS (
  INSERT INTO tool_operations (operation_id, tenant_id, run_id, step_id, tool_name, tool_contract_version,
                               request_digest, status, attempts, history, created_at, updated_at)
  VALUES (%(op)s, %(tenant)s, %(run)s, %(step)s, %(tool)s, %(contract)s, %(digest)s, 'prepared', 0,
          {_history_entry("'prepared'")}, statement_timestamp(), statement_timestamp())
  ON CONFLICT (tenant_id, operation_id) DO NOTHING
  RETURNING {_OP_COLUMNS})
SELECT {_OP_COLUMNS} FROM ins
UNION ALL
SELECT {_OP_COLUMNS} FROM tool_operations
 WHERE tenant_id = %(tenant)s AND operation_id = %(op)s AND NOT EXISTS (SELECT 1 FROM ins)
"""


def operation_prepare_once(
    *,
    tenant_id: UUID,
    operation_id: str,
    run_id: UUID,
    step_id: str,
    tool_name: str,
    tool_contract_version: str,
    request_digest: str,
    actor: str,
) -> OperationRow:
    """The operation row, created `prepared` the first time; the existing one on every later call."""
    rows = _rows(
        _OP_PREPARE,
        {
            "op": operation_id,
            "tenant": tenant_id,
            "run": run_id,
            "step": step_id,
            "tool": tool_name,
            "contract": tool_contract_version,
            "digest": request_digest,
            "actor": actor,
            "note": "",
        },
    )
    return _op(rows[0])


_OP_TRANSITION = f"""
UPDATE tool_operations o
   SET status = %(to)s::text,
       attempts = o.attempts + CASE WHEN %(to)s::text = 'started' THEN 1 ELSE 0 END,
       external_ref = COALESCE(%(ref)s, o.external_ref),
       result = COALESCE(%(result)s::jsonb, o.result),
       history = o.history || {_history_entry("%(to)s::text")},
       updated_at = statement_timestamp()
 WHERE o.tenant_id = %(tenant)s AND o.operation_id = %(op)s
   AND (o.status = ANY(%(from)s) OR (%(late)s AND o.status = 'prepared' AND o.attempts > 0))
   AND (%(epoch)s::bigint IS NULL OR EXISTS (
        SELECT 1 FROM agent_runs r WHERE r.run_id = %(acting_run)s::uuid AND r.lease_epoch = %(epoch)s::bigint
           AND r.lease_owner = %(actor)s))
RETURNING {_OP_COLUMNS.replace("operation_id", "o.operation_id")}
"""

# The protocol's transitions. started → prepared happens only when an authoritative lookup (or a
# person) confirms the request was not applied, which is what permits sending it again.
OPERATION_TRANSITIONS: dict[str, tuple[str, ...]] = {
    "started": ("prepared",),
    "succeeded": ("started", "unknown"),
    "failed": ("started",),
    "unknown": ("started",),
    "prepared": ("started", "unknown"),
}


def operation_transition(
    *,
    tenant_id: UUID,
    operation_id: str,
    to_status: str,
    actor: str,
    note: str = "",
    external_ref: str | None = None,
    result_json: str | None = None,
    lease_epoch: int | None = None,
    acting_run_id: UUID | None = None,
    late: bool = False,
) -> OperationRow | None:
    """Move the operation along the protocol; None if it is not in a status that allows this move.

    With `lease_epoch`, the move happens only while `actor` still holds the lease of the acting run
    (a fork acts on its parent's operation) at that epoch: a worker that lost its lease cannot start
    a side effect. `late`: a final outcome from a worker that sent the request and then lost its
    lease may also settle an operation a take-over found not applied and prepared again (started
    before, not started since): what the outside system did is the truth.
    """
    rows = _rows(
        _OP_TRANSITION,
        {
            "tenant": tenant_id,
            "op": operation_id,
            "to": to_status,
            "from": list(OPERATION_TRANSITIONS[to_status]),
            "ref": external_ref,
            "result": result_json,
            "actor": actor,
            "note": note,
            "epoch": lease_epoch,
            "acting_run": acting_run_id,
            "late": late and to_status in ("succeeded", "failed"),
        },
    )
    return _op(rows[0]) if rows else None


# --- erasure of a subject -----------------------------------------------------------------------

_SUBJECT_ERASED = """
WITH u AS (
  UPDATE agent_runs
     SET state = %(state)s::jsonb, state_digest = %(digest)s, subject = %(subject)s, result = %(result)s::jsonb,
         idempotency_key = %(idempotency_key)s,
         suspend_detail = CASE WHEN status IN ('running', 'suspended') THEN %(detail)s ELSE %(old_detail)s END,
         suspend_reason = CASE WHEN status IN ('running', 'suspended') THEN 'subject_erased' ELSE suspend_reason END,
         status = CASE WHEN status IN ('running', 'suspended') THEN 'suspended' ELSE status END,
         -- any worker's lease ends here: a worker mid-step can no longer commit
         lease_owner = NULL, lease_expires_at = NULL,
         wake_at = NULL, dispatched_at = NULL, resume_requested_at = NULL, resume_requested_by = '',
         state_revision = state_revision + 1, updated_at = statement_timestamp()
   WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND state_revision = %(expected)s
  RETURNING run_id, tenant_id, state_revision, next_step)
INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                          state_revision, state_digest, state, next_step, created_at)
SELECT run_id, tenant_id, state_revision, 'subject_erased', NULL, NULL, %(payload)s::jsonb, %(actor)s,
       state_revision, %(digest)s, %(state)s::jsonb, next_step, statement_timestamp() FROM u
RETURNING seq
"""


def subject_erased(
    *,
    run_id: UUID,
    tenant_id: UUID,
    expected_revision: int,
    state_json: str,
    state_digest: str,
    subject: str,
    result_json: str | None,
    idempotency_key: str | None,
    detail: str,
    old_detail: str,
    payload_json: str,
    actor: str,
) -> int | None:
    """Put the redacted state in place with a `subject_erased` event, in one fenced statement.

    The revision moves on, so a worker that read the state before cannot commit it back; an active
    run is left suspended (`subject_erased`) with no lease. None if the run moved on meanwhile.
    """
    params = {
        "run_id": run_id,
        "tenant_id": tenant_id,
        "expected": expected_revision,
        "state": state_json,
        "digest": state_digest,
        "subject": subject,
        "result": result_json,
        "idempotency_key": idempotency_key,
        "detail": detail,
        "old_detail": old_detail,
        "payload": payload_json,
        "actor": actor,
    }
    rows = _rows(_SUBJECT_ERASED, params)
    return rows[0][0] if rows else None


# --- signals ------------------------------------------------------------------------------------

# One statement: the signal becomes an event (its idempotency key in client_message_id, unique per
# run), the revision moves on (a worker mid-step is fenced out and reruns the step with the signal),
# and a run suspended waiting for exactly this signal is asked to resume now (its timeout, if any,
# no longer matters). A key used before on this run raises IntegrityError and nothing is written.
_SIGNAL_DELIVER = """
WITH old AS (
  SELECT run_id, (status = 'suspended' AND suspend_reason = 'signal'
                  AND suspend_detail = %(waiting_detail)s) AS waiting
    FROM agent_runs WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s FOR UPDATE),
u AS (
  UPDATE agent_runs r
     SET state_revision = r.state_revision + 1, updated_at = statement_timestamp(),
         resume_requested_at = CASE WHEN old.waiting THEN statement_timestamp() ELSE r.resume_requested_at END,
         resume_requested_by = CASE WHEN old.waiting THEN %(actor)s ELSE r.resume_requested_by END,
         wake_at = CASE WHEN old.waiting THEN NULL ELSE r.wake_at END,
         dispatched_at = CASE WHEN old.waiting THEN NULL ELSE r.dispatched_at END
    FROM old
   WHERE r.run_id = old.run_id AND r.status IN ('running', 'suspended') AND NOT r.imported
     AND r.suspend_reason IS DISTINCT FROM 'subject_erased'
  RETURNING r.run_id, r.tenant_id, r.state_revision, r.next_step, r.state_digest, old.waiting)
INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor, state_revision,
                          state_digest, next_step, client_message_id, created_at)
SELECT u.run_id, u.tenant_id, u.state_revision, 'signal_received', NULL, NULL, %(payload)s::jsonb, %(actor)s,
       u.state_revision, u.state_digest, u.next_step, %(key)s, statement_timestamp()
  FROM u
RETURNING seq, (SELECT waiting FROM u)
"""


def signal_deliver(
    *,
    run_id: UUID,
    tenant_id: UUID,
    waiting_detail: str,
    payload_json: str,
    actor: str,
    idempotency_key: str,
) -> tuple[int, bool] | None:
    """Record a `signal_received` event and wake the run if it waits for it: (seq, woken).

    None if the run is not active (or not this tenant's). `waiting_detail` is the suspend detail
    of a run waiting for this signal. A key used before on this run raises IntegrityError.
    """
    rows = _rows(
        _SIGNAL_DELIVER,
        {
            "run_id": run_id,
            "tenant_id": tenant_id,
            "waiting_detail": waiting_detail,
            "payload": payload_json,
            "actor": actor,
            "key": idempotency_key,
        },
    )
    return (rows[0][0], bool(rows[0][1])) if rows else None


# --- child runs ---------------------------------------------------------------------------------

# The parent still running under this very lease, locked until the caller's transaction ends: a
# cancel of the parent waits for it (and then sees the new child), or came first and refuses it.
_CHILD_PARENT_HELD = """
SELECT subject FROM agent_runs
 WHERE run_id = %(run_id)s AND status = 'running' AND lease_owner = %(owner)s AND lease_epoch = %(epoch)s
   FOR NO KEY UPDATE
"""


def child_parent_held(*, run_id: UUID, owner: str, epoch: int) -> str | None:
    """Lock the parent run if `owner` still holds it at `epoch`; its subject, or None if it does not."""
    rows = _rows(_CHILD_PARENT_HELD, {"run_id": run_id, "owner": owner, "epoch": epoch})
    return rows[0][0] if rows else None


_CHILD_LINK = """
UPDATE agent_runs SET child_of_run_id = %(parent)s
 WHERE run_id = %(child)s AND (child_of_run_id IS NULL OR child_of_run_id = %(parent)s)
RETURNING run_id
"""


def child_link(*, child_run_id: UUID, parent_run_id: UUID) -> bool:
    """Mark a run as the child of another (same tenant: row-level security shows no other's runs)."""
    return bool(_rows(_CHILD_LINK, {"child": child_run_id, "parent": parent_run_id}))


# --- a subject's runs ---------------------------------------------------------------------------

_SUBJECT_RUNS = """
WITH RECURSIVE tree AS (
  SELECT run_id FROM agent_runs WHERE tenant_id = %(tenant)s AND subject IN (%(subject)s, %(erased)s)
  UNION
  SELECT r.run_id FROM agent_runs r JOIN tree ON r.parent_run_id = tree.run_id WHERE r.tenant_id = %(tenant)s)
SELECT run_id FROM tree
"""


def subject_run_ids(*, tenant_id: UUID, subject_id: str, subject_digest: str) -> tuple[UUID, ...]:
    """The subject's runs and every fork of them (sorted), including runs an interrupted erasure
    already marked `erased:<digest>`: what each eraser of run data works on. Under the bound tenant."""
    params = {"tenant": tenant_id, "subject": subject_id, "erased": f"erased:{subject_digest}"}
    return tuple(sorted(row[0] for row in _rows(_SUBJECT_RUNS, params)))
