"""The one shape of a statement that moves a run: a fenced UPDATE of its row feeding the INSERT of its event.

    WITH u AS (UPDATE agent_runs SET <the move's columns>, state_revision = state_revision + 1 ...
                WHERE run_id = ... AND <the move's fence> RETURNING ...)
    [, outbox AS (INSERT INTO webhook_deliveries ... FROM u)]     -- an event subscribers hear of
    [, parent AS (UPDATE agent_runs ... the parent of a child that finished), parent_event AS (...)]
    INSERT INTO agent_events (...) SELECT ... FROM u RETURNING seq

Every event takes the run's next revision, so seq = state_revision and the row always names the event
it reflects. No row back means the fence held: nothing was written. What the webhooks outbox and a
waiting parent need is derived from the move (its new status), in the same statement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_EVENT_COLUMNS = (
    "run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor, state_revision, state_digest, "
    "state, next_step, client_message_id, created_at, run_created_at"
)

# One row per subscription of the run's tenant to this event type (runs/webhooks/). Only an event a
# subscriber can hear of runs the statement with this clause; a tenant with none costs one index probe.
# The event id is the same for every subscription of one event. A replay (runs/evaluation/) hears nothing.
OUTBOX = """
, outbox AS (
  INSERT INTO webhook_deliveries (tenant_id, subscription_id, event_id, event_type, run_id, data, status,
                                  attempts, next_attempt_at, last_error, history, created_at)
  SELECT u.tenant_id, s.id, md5(u.run_id::text || ':' || u.state_revision::text)::uuid, %(webhook)s::text,
         u.run_id, jsonb_build_object('status', %(webhook_status)s::text, 'reason', %(webhook_reason)s::text,
                                      'revision', u.state_revision),
         'pending', 0, statement_timestamp(), '', '[]'::jsonb, statement_timestamp()
    FROM u JOIN webhook_subscriptions s ON s.tenant_id = u.tenant_id AND s.deleted_at IS NULL
   WHERE %(webhook)s::text = ANY(s.event_types)
     -- an evaluation's replay is not the customer's work: its endings tell no subscriber
     AND NOT EXISTS (SELECT 1 FROM agent_runs x WHERE x.run_id = u.run_id AND x.tenant_id = u.tenant_id
                     AND x.replay))"""

# A child run that finished (completed, failed, cancelled) tells its parent in the same statement: the
# parent's next revision records `child_finished`, and a parent suspended waiting for exactly this
# child is asked to resume. Added only to the statements of moves that end a run that was active (their
# fence says so), so a finished run that stays finished tells nobody twice.
PARENT = """
, parent AS (
  UPDATE agent_runs p
     SET state_revision = p.state_revision + 1, updated_at = statement_timestamp(),
         resume_requested_at = CASE WHEN w.waiting THEN statement_timestamp() ELSE p.resume_requested_at END,
         resume_requested_by = CASE WHEN w.waiting THEN 'child_run' ELSE p.resume_requested_by END,
         wake_at = CASE WHEN w.waiting THEN NULL ELSE p.wake_at END,
         dispatched_at = CASE WHEN w.waiting THEN NULL ELSE p.dispatched_at END
    FROM u, LATERAL (SELECT a.run_id, (a.status = 'suspended' AND a.suspend_reason = 'child_run'
                                       AND a.suspend_detail = 'waiting for child run ' || u.run_id::text) AS waiting
                       FROM agent_runs a WHERE a.run_id = u.child_of_run_id AND a.tenant_id = u.tenant_id
                        FOR UPDATE) w
   WHERE u.child_of_run_id IS NOT NULL AND u.status IN ('completed', 'failed', 'cancelled')
     AND p.run_id = w.run_id AND p.tenant_id = u.tenant_id AND p.status IN ('running', 'suspended') AND NOT p.imported
     AND p.suspend_reason IS DISTINCT FROM 'subject_erased'
  RETURNING p.run_id, p.tenant_id, p.state_revision, p.state_digest, p.next_step, p.created_at, w.waiting,
            u.run_id AS child, u.status AS child_status),
parent_event AS (
  INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                            state_revision, state_digest, next_step, created_at, run_created_at)
  SELECT run_id, tenant_id, state_revision, 'child_finished', NULL, NULL,
         jsonb_build_object('child_run_id', child, 'status', child_status, 'woke', waiting),
         'child:' || child::text, state_revision, state_digest, next_step, statement_timestamp(), created_at
    FROM parent)"""


@dataclass(frozen=True)
class Event:
    """The event row a move writes: SQL expressions over `u` (the updated run) and parameters."""

    event_type: str = "%(event_type)s"
    step_id: str = "NULL"
    attempt: str = "NULL"
    payload: str = "%(payload)s::jsonb"
    actor: str = "%(actor)s"
    state_digest: str = "u.state_digest"
    state: str = "NULL"
    next_step: str = "u.next_step"
    client_message_id: str = "NULL"

    def insert(self) -> str:
        return (
            f"INSERT INTO agent_events ({_EVENT_COLUMNS})\n"
            f"SELECT u.run_id, u.tenant_id, u.state_revision, {self.event_type}, {self.step_id}, {self.attempt},"
            f" {self.payload}, {self.actor}, u.state_revision, {self.state_digest}, {self.state}, {self.next_step},"
            f" {self.client_message_id}, statement_timestamp(), u.created_at FROM u\n"
        )


# What `u` returns: the event and the derived clauses read these.
# created_at is the event's partition key (agent_events.run_created_at).
RETURNING = "run_id, tenant_id, state_revision, state_digest, next_step, status, child_of_run_id, created_at"


def moving(
    update: str, event: Event, *, returning: str = "seq", outbox: bool = False, parent: bool = False
) -> str:
    """The statement of a move: `update` is the `u` CTE's UPDATE (it RETURNs at least RETURNING), then
    the derived clauses, then the event."""
    extra = (OUTBOX if outbox else "") + (PARENT if parent else "")
    return f"WITH u AS (\n{update}){extra}\n{event.insert()}RETURNING {returning}\n"


_PG_TYPES = {
    0: "text",
    16: "boolean",
    20: "bigint",
    23: "integer",
    25: "text",
    701: "double precision",
    2950: "uuid",
}
_PLACEHOLDER = re.compile(r"%\((\w+)\)s")


@dataclass(frozen=True)
class Function:
    """A PL/pgSQL function made from move statements: `source` as pg_get_functiondef prints it (so the
    database can be checked against it), `call` the statement that runs it with %(name)s parameters."""

    name: str
    source: str
    call: str


def plpgsql_function(name: str, types: dict[str, int], branches: list[tuple[str, str]]) -> Function:
    """One function over `types` (parameter name -> type OID, in order) running the first branch
    whose condition holds; each branch is a statement ending in `RETURNING <one value>`, returned."""
    params = ", ".join(f"p_{n} {_PG_TYPES[t]}" for n, t in types.items())
    body = []
    for i, (condition, statement) in enumerate(branches):
        unknown = set(_PLACEHOLDER.findall(statement)) - set(types)
        if unknown:
            raise ValueError(f"{name}: no type for {sorted(unknown)}")
        sql = _PLACEHOLDER.sub(r"p_\1", statement).rstrip()
        body.append(f"  {'IF' if i == 0 else 'ELSIF'} {condition} THEN\n{sql} INTO result;\n")
    source = (
        f"CREATE OR REPLACE FUNCTION public.{name}({params})\n RETURNS bigint\n LANGUAGE plpgsql\n"
        f"AS $function$\nDECLARE\n  result bigint;\nBEGIN\n{''.join(body)}  END IF;\n  RETURN result;\n"
        f"END\n$function$\n"
    )
    call = f"SELECT {name}(" + ", ".join(f"%({n})s" for n in types) + ")"
    return Function(name, source, call)
