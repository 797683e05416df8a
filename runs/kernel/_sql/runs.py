"""The statements that move runs, one per kind of move, each built from template.moving().

Times are statement_timestamp(), not now(): inside a longer transaction now() stands still, and a
lease must expire by the clock.
"""

from __future__ import annotations

from core.db import wire
from runs.kernel._sql.template import RETURNING, Event, moving, plpgsql_function

# --- a new run and its first event -----------------------------------------------------------------

INSERT_RUN = """
WITH r AS (
  INSERT INTO agent_runs (run_id, tenant_id, workflow_name, workflow_version, state_schema_version,
                          status, next_step, state, state_revision, suspend_detail, lease_epoch,
                          attempt, idempotency_key, input_digest, parent_run_id, fork_seq, fork_expires_at,
                          suspend_reason, resume_requested_by, subject, state_digest, replay, created_at,
                          updated_at)
  VALUES (%(run_id)s, %(tenant_id)s, %(workflow_name)s, %(workflow_version)s, %(schema)s,
          %(status)s, %(next_step)s, %(state)s::jsonb, 1, '', 0, 0, %(key)s, %(input_digest)s,
          %(parent)s, %(fork_seq)s, %(fork_expires_at)s, %(suspend_reason)s, '', %(subject)s, %(digest)s,
          %(replay)s, statement_timestamp(), statement_timestamp())
  ON CONFLICT (tenant_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
  RETURNING *),
e AS (
  INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                            state_revision, state_digest, state, next_step, created_at, run_created_at)
  SELECT run_id, tenant_id, state_revision, %(event_type)s, NULL, NULL, %(payload)s::jsonb, %(actor)s,
         state_revision, %(digest)s, %(state)s::jsonb, %(next_step)s, statement_timestamp(), created_at FROM r)
SELECT {columns} FROM r
"""
INSERT_RUN_TYPES = {
    "run_id": wire.UUID,
    "tenant_id": wire.UUID,
    "workflow_name": wire.TEXT,
    "workflow_version": wire.TEXT,
    "schema": wire.INT4,
    "status": wire.TEXT,
    "next_step": wire.TEXT,
    "state": wire.TEXT,
    "key": wire.TEXT,
    "input_digest": wire.TEXT,
    "parent": wire.UUID,
    "fork_seq": wire.INT8,
    "fork_expires_at": wire.UNKNOWN,  # the column's timestamptz
    "suspend_reason": wire.TEXT,
    "subject": wire.TEXT,
    "digest": wire.TEXT,
    "replay": wire.BOOL,
    "event_type": wire.TEXT,
    "payload": wire.TEXT,
    "actor": wire.TEXT,
}

# --- the step commit: every lease holder's move (the hot path, one prepared statement) ---------------

_COMMIT_UPDATE = f"""  UPDATE agent_runs
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
   WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND state_revision = %(expected)s
     AND lease_epoch = %(epoch)s AND lease_owner = %(owner)s AND status IN ('running', 'suspended')
  RETURNING {RETURNING}"""
_COMMIT_EVENT = Event(
    step_id="%(step_id)s",
    attempt="%(attempt)s",
    actor="%(owner)s",
    state_digest="%(digest)s",
    state="CASE WHEN %(event_state)s THEN %(state)s::jsonb END",
    next_step="%(next_step)s",
)
COMMIT_TYPES = {
    "run_id": wire.UUID,
    "tenant_id": wire.UUID,
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
_HOOK_TYPES = {"webhook", "webhook_status", "webhook_reason"}
_PLAIN_TYPES = {k: v for k, v in COMMIT_TYPES.items() if k not in _HOOK_TYPES}
_ENDS_SQL = moving(_COMMIT_UPDATE, _COMMIT_EVENT, outbox=True, parent=True)  # a run ending
# A run that ends also says whether it answered a turn before (an assistant message: only such a run
# has procedures to learn), in the same round trip. Its events are all in its own partition.
_ANSWERED = """EXISTS (SELECT 1 FROM agent_events a
                 WHERE a.tenant_id = agent_events.tenant_id AND a.run_id = agent_events.run_id
                   AND a.run_created_at = agent_events.run_created_at AND a.event_type = 'assistant_message')"""
_OUTBOX_SQL = moving(_COMMIT_UPDATE, _COMMIT_EVENT, outbox=True)  # an event subscribers hear of
_PLAIN_SQL = moving(_COMMIT_UPDATE, _COMMIT_EVENT)
COMMIT = wire.Statement.named("keeper_commit_step", _PLAIN_SQL, _PLAIN_TYPES)
COMMIT_OUTBOX = wire.Statement.named("keeper_commit_step_outbox", _OUTBOX_SQL, COMMIT_TYPES)
COMMIT_ENDS = wire.Statement.named(
    "keeper_commit_step_ends",
    moving(_COMMIT_UPDATE, _COMMIT_EVENT, returning=f"seq, {_ANSWERED}", outbox=True, parent=True),
    COMMIT_TYPES,
)
# Where statements cannot be prepared (behind a transaction pooler), the same three statements run
# inside a PL/pgSQL function, which returns the seq alone: the server keeps a function's plans for
# the session whatever the client may prepare. Sent unprepared, a statement was parsed and planned on
# every step, at about half the commits per second; prepared, the statement itself saves the call.
COMMIT_FUNCTION = plpgsql_function(
    "keeper_commit_step",
    COMMIT_TYPES,
    [
        ("p_status IN ('completed', 'failed', 'cancelled')", _ENDS_SQL),
        ("p_webhook IS NOT NULL", _OUTBOX_SQL),
        ("true", _PLAIN_SQL),
    ],
)
COMMIT_CALL = wire.Statement.named("keeper_commit_step_call", COMMIT_FUNCTION.call, COMMIT_TYPES)

# --- transitions by people and the system ------------------------------------------------------------

_TRANSITION_UPDATE = f"""  UPDATE agent_runs
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
   WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = ANY(%(from_statuses)s)
     AND (%(expected)s::bigint IS NULL OR state_revision = %(expected)s::bigint)
     AND (%(only_if_reason)s::text IS NULL OR suspend_reason = %(only_if_reason)s::text)
     AND (NOT %(only_if_fork_expired)s
          OR (resume_requested_at IS NULL AND fork_expires_at < statement_timestamp()))
     AND NOT imported
     -- nothing asks a run whose subject was erased to continue (a resume, an approval, a message)
     AND NOT (%(request_resume)s AND suspend_reason IS NOT DISTINCT FROM 'subject_erased')
     -- a person's resume asked again before a worker verified the first changes nothing
     AND NOT (%(unless_resume_pending)s AND resume_requested_at IS NOT NULL)
  RETURNING {RETURNING}"""
TRANSITION = moving(_TRANSITION_UPDATE, Event())
TRANSITION_OUTBOX = moving(_TRANSITION_UPDATE, Event(), outbox=True)
TRANSITION_ENDS = moving(_TRANSITION_UPDATE, Event(), outbox=True, parent=True)

ACCEPT_STATE = moving(
    f"""  UPDATE agent_runs
     SET state_digest = %(digest)s, state_revision = state_revision + 1, updated_at = statement_timestamp(),
         suspend_reason = 'state_accepted', suspend_detail = %(detail)s, attempt = 0,
         lease_owner = NULL, lease_expires_at = NULL, wake_at = NULL, dispatched_at = NULL
   WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'suspended'
     AND state_revision = %(expected)s AND suspend_reason = ANY(%(reasons)s) AND state = %(state)s::jsonb
     AND (lease_owner IS NULL OR lease_expires_at < statement_timestamp()) AND NOT imported
  RETURNING {RETURNING}""",
    Event(event_type="'state_accepted'", state_digest="%(digest)s", state="%(state)s::jsonb"),
)

# A person's correction of an operation's reconciliation: back to the step that made the call, with the
# state it began from, written on the event too (the state at any seq stays rebuildable).
RECONCILIATION_CORRECTED = moving(
    f"""  UPDATE agent_runs
     SET state = %(state)s::jsonb, state_digest = %(digest)s, next_step = %(next_step)s,
         state_revision = state_revision + 1, updated_at = statement_timestamp(),
         suspend_reason = 'reconciliation_corrected', suspend_detail = %(detail)s, attempt = 0,
         lease_owner = NULL, lease_expires_at = NULL, wake_at = NULL, dispatched_at = NULL,
         resume_requested_at = CASE WHEN %(request_resume)s THEN statement_timestamp() END,
         resume_requested_by = CASE WHEN %(request_resume)s THEN %(actor)s ELSE '' END
   WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'suspended'
     AND state_revision = %(expected)s AND resume_requested_at IS NULL
     AND suspend_reason IS DISTINCT FROM 'subject_erased'
     AND (lease_owner IS NULL OR lease_expires_at < statement_timestamp()) AND NOT imported
  RETURNING {RETURNING}""",
    Event(event_type="'reconciliation_corrected'", state_digest="%(digest)s", state="%(state)s::jsonb"),
)

SUBJECT_ERASED = moving(
    f"""  UPDATE agent_runs
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
  RETURNING {RETURNING}""",
    Event(event_type="'subject_erased'", state_digest="%(digest)s", state="%(state)s::jsonb"),
)

# --- a branch's workspace merged into a run of its tree ---------------------------------------------

# No live lease: a holder may keep committed files it has not snapshotted yet, which the merge would
# not have seen. A run that waits for its conflicts is woken the way a person's resume wakes it.
_WAITS = "%(wait)s AND status = 'running'"
_WAKES = "%(resume)s AND status = 'suspended' AND suspend_reason = 'merge_conflicts'"
WORKSPACE_MERGED = moving(
    f"""  UPDATE agent_runs
     SET state = COALESCE(%(state)s::jsonb, state), state_digest = COALESCE(%(digest)s, state_digest),
         status = CASE WHEN {_WAITS} THEN 'suspended' ELSE status END,
         suspend_reason = CASE WHEN {_WAITS} THEN 'merge_conflicts' ELSE suspend_reason END,
         suspend_detail = CASE WHEN {_WAITS} THEN %(detail)s ELSE suspend_detail END,
         resume_requested_at = CASE WHEN {_WAKES} THEN statement_timestamp() ELSE resume_requested_at END,
         resume_requested_by = CASE WHEN {_WAKES} THEN %(actor)s ELSE resume_requested_by END,
         dispatched_at = CASE WHEN {_WAKES} THEN NULL ELSE dispatched_at END,
         lease_owner = NULL, lease_expires_at = NULL,
         state_revision = state_revision + 1, updated_at = statement_timestamp()
   WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND state_revision = %(expected)s
     AND (lease_owner IS NULL OR lease_expires_at < statement_timestamp()) AND NOT imported
     AND suspend_reason IS DISTINCT FROM 'subject_erased'
  RETURNING {RETURNING}""",
    Event(state="%(state)s::jsonb"),
)

# --- events that leave the state as it is ----------------------------------------------------------

# The next revision of an active run (a worker mid-step is fenced out and reruns the step with it).
_ACTIVE_BUMP = f"""  UPDATE agent_runs SET state_revision = state_revision + 1, updated_at = statement_timestamp()
   WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status IN ('running', 'suspended')
     AND NOT imported AND suspend_reason IS DISTINCT FROM 'subject_erased'
  RETURNING {RETURNING}"""
APPEND_EVENT = moving(_ACTIVE_BUMP, Event(client_message_id="%(client_message_id)s"))

# Usage comes after the run's own work (fact extraction after it completed): any status but an
# erased subject's, never an imported copy.
USAGE_CHARGED = moving(
    f"""  UPDATE agent_runs SET state_revision = state_revision + 1, updated_at = statement_timestamp()
   WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND NOT imported
     AND suspend_reason IS DISTINCT FROM 'subject_erased'
  RETURNING {RETURNING}""",
    Event(event_type="'model_usage'"),
)

# The signal becomes an event (its idempotency key in client_message_id, unique per run), and a run
# suspended waiting for exactly this signal is asked to resume now (its timeout no longer matters).
SIGNAL_DELIVER = """
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
  RETURNING r.run_id, r.tenant_id, r.state_revision, r.next_step, r.state_digest, r.created_at, old.waiting)
INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor, state_revision,
                          state_digest, next_step, client_message_id, created_at, run_created_at)
SELECT u.run_id, u.tenant_id, u.state_revision, 'signal_received', NULL, NULL, %(payload)s::jsonb, %(actor)s,
       u.state_revision, u.state_digest, u.next_step, %(key)s, statement_timestamp(), u.created_at
  FROM u
RETURNING seq, (SELECT waiting FROM u)
"""

CHILD_LINK = """
UPDATE agent_runs SET child_of_run_id = %(parent)s
 WHERE run_id = %(child)s AND tenant_id = %(tenant)s
   AND (child_of_run_id IS NULL OR child_of_run_id = %(parent)s)
RETURNING run_id
"""

# A fork's copy of its parent's conversation up to the fork point: numbered after the fork's first
# event, each naming its source; a reply's in_reply_to follows the message it answers to its new seq.
# Only while the fork is still at its first revision (nothing else was appended meanwhile).
EVENTS_COPY = """
WITH src AS (
  SELECT e.*, 1 + row_number() OVER (ORDER BY e.seq) AS new_seq
    FROM agent_events e
   WHERE e.run_id = %(source)s AND e.tenant_id = %(tenant)s AND e.seq <= %(up_to)s
     AND e.event_type = ANY(%(types)s)),
u AS (
  UPDATE agent_runs SET state_revision = 1 + (SELECT count(*) FROM src)
   WHERE run_id = %(run_id)s AND tenant_id = %(tenant)s AND state_revision = 1 AND EXISTS (SELECT 1 FROM src)
  RETURNING run_id, tenant_id, state_digest, next_step, created_at),
ins AS (
  INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor, state_revision,
                            state_digest, state, next_step, client_message_id, created_at, run_created_at)
  SELECT u.run_id, u.tenant_id, src.new_seq, src.event_type, src.step_id, src.attempt,
         (src.payload - 'spent')
           || jsonb_build_object('forked_from',
                jsonb_build_object('run_id', src.run_id::text, 'seq', src.seq)
                || CASE WHEN src.payload ? 'in_reply_to'
                        THEN jsonb_build_object('in_reply_to', src.payload -> 'in_reply_to') ELSE '{}'::jsonb END)
           || CASE WHEN src.payload ? 'in_reply_to'
                   THEN jsonb_build_object('in_reply_to',
                          (SELECT to_jsonb(o.new_seq) FROM src o
                            WHERE jsonb_typeof(src.payload -> 'in_reply_to') = 'number'
                              AND o.seq = (src.payload ->> 'in_reply_to')::numeric))
                   ELSE '{}'::jsonb END,
         src.actor, src.new_seq, u.state_digest, NULL, u.next_step, src.client_message_id, statement_timestamp(),
         u.created_at
    FROM u, src
  RETURNING 1)
SELECT count(*) FROM ins
"""

# --- the demo and tests only: a state changed outside the engine -------------------------------------

STATE_ALTERED = """
UPDATE agent_runs SET state = COALESCE(%(state)s::jsonb, state),
       state_schema_version = COALESCE(%(schema)s::int, state_schema_version)
 WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s RETURNING run_id
"""
