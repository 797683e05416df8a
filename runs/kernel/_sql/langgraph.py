"""The statements by which a LangGraph thread moves its run: a checkpoint, an interrupt asked or answered,
the thread deleted. LangGraph's own tables (checkpoints, blobs, writes) are runs/langgraph's."""

from __future__ import annotations

from core.db import wire
from runs.kernel._sql.template import RETURNING, Event, moving

# keeper_langgraph_put (functions/keeper_langgraph_put.sql) binds the tenant itself, for this call only.
CHECKPOINT_PUT = wire.Statement(
    "keeper_langgraph_put",
    "SELECT keeper_langgraph_put($1::uuid, $2::uuid, $3, $4, $5, $6, $7::jsonb, $8::jsonb, $9::jsonb,"
    " $10::bytea[], $11::jsonb, $12)",
    params=12,
    binary=[9],
)

THREAD_REASONS = "('langgraph_thread', 'langgraph_interrupt', 'langgraph_answered')"

# The run's row is locked before the statement that asks whether the thread moved past this checkpoint,
# so that statement's snapshot sees a checkpoint put while it waited (a graph's put locks the row).
LOCK_RUN = "SELECT 1 FROM agent_runs WHERE run_id = %(run)s AND tenant_id = %(tenant)s FOR UPDATE"

# A root task's interrupt(): with its writes, the thread's run waits for a person (the support inbox)
# and an event records what the graph asks, unless the thread has moved past this checkpoint. Tasks of
# one superstep that interrupt together each add their question to the detail the inbox shows.
INTERRUPT_ASKED = f"""
WITH open AS (
  SELECT r.run_id FROM agent_runs r
   WHERE r.run_id = %(run)s AND r.tenant_id = %(tenant)s AND r.status = 'suspended'
     AND r.suspend_reason IN {THREAD_REASONS} AND NOT r.imported
     FOR UPDATE),
w AS (
  INSERT INTO langgraph_writes (tenant_id, run_id, thread_id, checkpoint_ns, checkpoint_id, task_id, task_path,
                                idx, channel, type, blob)
  SELECT %(tenant)s, open.run_id, %(thread)s, %(ns)s, %(checkpoint_id)s, %(task)s, %(path)s, x.idx, x.channel,
         x.type, x.blob
    FROM open, unnest(%(idx)s::int[], %(channels)s::text[], %(types)s::text[], %(blobs)s::bytea[])
         AS x(idx, channel, type, blob)
  ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
  DO UPDATE SET channel = EXCLUDED.channel, type = EXCLUDED.type, blob = EXCLUDED.blob),
u AS (
  UPDATE agent_runs
     SET state_revision = state_revision + 1, updated_at = statement_timestamp(),
         suspend_reason = 'langgraph_interrupt',
         suspend_detail = CASE WHEN suspend_reason = 'langgraph_interrupt' AND suspend_detail <> ''
                                    AND strpos(suspend_detail, %(detail)s) = 0
                               THEN left(suspend_detail || ' · ' || %(detail)s, 300) ELSE %(detail)s END
   WHERE run_id = %(run)s AND tenant_id = %(tenant)s AND status = 'suspended'
     AND suspend_reason IN {THREAD_REASONS} AND NOT imported
     AND NOT EXISTS (SELECT 1 FROM langgraph_checkpoints c
                      WHERE c.tenant_id = %(tenant)s AND c.thread_id = %(thread)s AND c.checkpoint_ns = ''
                        AND c.checkpoint_id > %(checkpoint_id)s)
  RETURNING {RETURNING}),
e AS (
  {Event(event_type="'langgraph_interrupt'").insert()})
SELECT count(*) FROM open
"""

# Compare-and-set on the run row: still interrupted, at the revision read with the interrupt (a second
# click, or an answer racing this one, changes neither and so records nothing).
INTERRUPT_ANSWERED = moving(
    f"""  UPDATE agent_runs
     SET state_revision = state_revision + 1, updated_at = statement_timestamp(),
         suspend_reason = %(reason)s, suspend_detail = %(detail)s
   WHERE run_id = %(run_id)s AND tenant_id = %(tenant_id)s AND status = 'suspended'
     AND suspend_reason = 'langgraph_interrupt' AND state_revision = %(expected)s AND NOT imported
  RETURNING {RETURNING}""",
    Event(event_type="'langgraph_interrupt_answered'"),
)

THREAD_RUN_LOCKED = """
SELECT run_id FROM agent_runs WHERE tenant_id = %(tenant)s AND idempotency_key = %(key)s
                                AND workflow_name = 'langgraph' FOR UPDATE
"""

THREAD_DELETED = """
WITH r AS (SELECT run_id FROM agent_runs WHERE tenant_id = %(tenant)s AND idempotency_key = %(key)s
                                           AND workflow_name = 'langgraph'),
w AS (DELETE FROM langgraph_writes WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s),
b AS (DELETE FROM langgraph_blobs WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s),
c AS (DELETE FROM langgraph_checkpoints WHERE tenant_id = %(tenant)s AND thread_id = %(thread)s),
e AS (DELETE FROM agent_events WHERE tenant_id = %(tenant)s AND run_id IN (SELECT run_id FROM r))
DELETE FROM agent_runs WHERE tenant_id = %(tenant)s AND run_id IN (SELECT run_id FROM r) RETURNING run_id
"""
