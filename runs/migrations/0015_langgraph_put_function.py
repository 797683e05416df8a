"""A LangGraph checkpoint put as one call: keeper_langgraph_put binds the tenant, locks the run and
stores the checkpoint with its event (runs.langgraph.store), instead of three pipelined statements.

SECURITY INVOKER: it runs as the application role under row-level security, like the statements it
replaces; in PL/pgSQL each statement takes a fresh snapshot, so the put that follows the lock sees
an interrupt another of LangGraph's threads stored while the put waited for the row.
"""

from __future__ import annotations

from django.db import migrations

FUNCTION = """
CREATE FUNCTION keeper_langgraph_put(
    p_tenant uuid, p_run uuid, p_thread text, p_ns text, p_checkpoint_id text, p_parent text,
    p_checkpoint jsonb, p_metadata jsonb, p_channels text[], p_versions text[], p_types text[],
    p_blobs bytea[], p_state jsonb, p_digest text, p_payload jsonb, p_actor text)
  RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  previous text := current_setting('app.tenant_id', true);
  root boolean := p_ns = '';
  row_at tid;
  result bigint;
BEGIN
  PERFORM set_config('app.tenant_id', p_tenant::text, true);
  -- The run's row first, in a statement of its own: the put below then reads the interrupts of
  -- every writer that held the row (a snapshot taken after the lock), and finds the row it holds
  -- by its place, without walking the index again.
  SELECT ctid INTO row_at FROM agent_runs WHERE run_id = p_run AND tenant_id = p_tenant FOR UPDATE;
  WITH u AS (
    UPDATE agent_runs r
       SET state_revision = r.state_revision + 1,
           -- At most once a second: an unchanged updated_at (an indexed column) keeps the update HOT.
           updated_at = CASE WHEN r.updated_at < statement_timestamp() - interval '1 second'
                             THEN statement_timestamp() ELSE r.updated_at END,
           state = CASE WHEN root THEN p_state ELSE r.state END,
           state_digest = CASE WHEN root THEN p_digest ELSE r.state_digest END,
           -- A new root checkpoint ends the wait for a person (and for an answer), unless the graph
           -- stopped at an interrupt() on it or a later one (LangGraph writes checkpoints in the
           -- background: a later checkpoint's interrupt can be stored before this one).
           suspend_reason = CASE WHEN NOT root THEN r.suspend_reason
                                 WHEN i.open THEN 'langgraph_interrupt' ELSE 'langgraph_thread' END,
           suspend_detail = CASE WHEN root AND NOT i.open THEN '' ELSE r.suspend_detail END
      FROM (SELECT root AND EXISTS (
              SELECT 1 FROM langgraph_writes w
               WHERE w.tenant_id = p_tenant AND w.thread_id = p_thread AND w.checkpoint_ns = ''
                 AND w.checkpoint_id >= p_checkpoint_id AND w.channel = '__interrupt__') AS open) i
     WHERE r.ctid = row_at AND r.run_id = p_run AND r.tenant_id = p_tenant AND r.status = 'suspended'
       AND r.suspend_reason IN ('langgraph_thread', 'langgraph_interrupt', 'langgraph_answered')
       AND NOT r.imported
    RETURNING r.run_id, r.tenant_id, r.state_revision, r.state_digest, r.next_step),
  b AS (
    INSERT INTO langgraph_blobs (tenant_id, run_id, thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT u.tenant_id, u.run_id, p_thread, p_ns, x.channel, x.version, x.type, x.blob
      FROM u, unnest(p_channels, p_versions, p_types, p_blobs) AS x(channel, version, type, blob)
    ON CONFLICT (tenant_id, thread_id, checkpoint_ns, channel, version) DO NOTHING),
  c AS (
    INSERT INTO langgraph_checkpoints (tenant_id, run_id, thread_id, checkpoint_ns, checkpoint_id,
                                       parent_checkpoint_id, checkpoint, metadata, seq)
    SELECT u.tenant_id, u.run_id, p_thread, p_ns, p_checkpoint_id, p_parent, p_checkpoint, p_metadata,
           u.state_revision FROM u
    ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id)
    DO UPDATE SET checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata, seq = EXCLUDED.seq,
                  parent_checkpoint_id = EXCLUDED.parent_checkpoint_id)
  INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                            state_revision, state_digest, state, next_step, created_at)
  SELECT u.run_id, u.tenant_id, u.state_revision, 'langgraph_checkpoint', NULL, NULL, p_payload, p_actor,
         u.state_revision, u.state_digest, CASE WHEN root THEN p_state END, u.next_step, statement_timestamp()
    FROM u
  RETURNING seq INTO result;
  PERFORM set_config('app.tenant_id', coalesce(previous, ''), true);
  RETURN result;
END $$;
"""
SIGNATURE = (
    "keeper_langgraph_put(uuid, uuid, text, text, text, text, jsonb, jsonb, text[], text[], text[], bytea[],"
    " jsonb, text, jsonb, text)"
)


class Migration(migrations.Migration):
    dependencies = [("runs", "0014_approvals_keyset_index")]

    operations = [migrations.RunSQL(FUNCTION, f"DROP FUNCTION IF EXISTS {SIGNATURE}")]
