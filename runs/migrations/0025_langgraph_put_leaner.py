"""A leaner checkpoint put (runs 0015's keeper_langgraph_put): the channel/version/type of each blob
come as one JSON array beside one bytea array (four arrays cost the client more to send than the
rest of the put); the run's row is locked by the statement that updates it, not by one before it;
and the thread's interrupt writes are read (and the wait updated) only when the run waits or was
answered, never for a thread that waits for no one (most puts).
"""

from __future__ import annotations

from importlib import import_module

from django.db import migrations

FUNCTION = """
CREATE FUNCTION keeper_langgraph_put(
    p_tenant uuid, p_run uuid, p_thread text, p_ns text, p_checkpoint_id text, p_parent text,
    p_checkpoint jsonb, p_metadata jsonb, p_blob_keys jsonb, p_blobs bytea[], p_state jsonb, p_digest text,
    p_payload jsonb, p_actor text)
  RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  previous text := current_setting('app.tenant_id', true);
  root boolean := p_ns = '';
  prior text;
  open boolean := false;
  result bigint;
BEGIN
  PERFORM set_config('app.tenant_id', p_tenant::text, true);
  -- One statement locks and updates the run's row (its next revision; its state = the latest root
  -- checkpoint), stores the new channel values once per version and the checkpoint row, and appends
  -- the event that records it. The wait for a person is left as it was: see below.
  WITH u AS (
    UPDATE agent_runs r
       SET state_revision = r.state_revision + 1,
           -- At most once a second: an unchanged updated_at (an indexed column) keeps the update HOT.
           updated_at = CASE WHEN r.updated_at < statement_timestamp() - interval '1 second'
                             THEN statement_timestamp() ELSE r.updated_at END,
           state = CASE WHEN root THEN p_state ELSE r.state END,
           state_digest = CASE WHEN root THEN p_digest ELSE r.state_digest END
     WHERE r.run_id = p_run AND r.tenant_id = p_tenant AND r.status = 'suspended'
       AND r.suspend_reason IN ('langgraph_thread', 'langgraph_interrupt', 'langgraph_answered')
       AND NOT r.imported
    RETURNING r.run_id, r.tenant_id, r.state_revision, r.state_digest, r.next_step, r.suspend_reason),
  b AS (
    INSERT INTO langgraph_blobs (tenant_id, run_id, thread_id, checkpoint_ns, channel, version, type, blob)
    SELECT u.tenant_id, u.run_id, p_thread, p_ns, k.key ->> 0, k.key ->> 1, k.key ->> 2, p_blobs[k.i]
      FROM u, jsonb_array_elements(p_blob_keys) WITH ORDINALITY AS k(key, i)
    ON CONFLICT (tenant_id, thread_id, checkpoint_ns, channel, version) DO NOTHING),
  c AS (
    INSERT INTO langgraph_checkpoints (tenant_id, run_id, thread_id, checkpoint_ns, checkpoint_id,
                                       parent_checkpoint_id, checkpoint, metadata, seq)
    SELECT u.tenant_id, u.run_id, p_thread, p_ns, p_checkpoint_id, p_parent, p_checkpoint, p_metadata,
           u.state_revision FROM u
    ON CONFLICT (tenant_id, thread_id, checkpoint_ns, checkpoint_id)
    DO UPDATE SET checkpoint = EXCLUDED.checkpoint, metadata = EXCLUDED.metadata, seq = EXCLUDED.seq,
                  parent_checkpoint_id = EXCLUDED.parent_checkpoint_id),
  e AS (
    INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                              state_revision, state_digest, state, next_step, created_at)
    SELECT u.run_id, u.tenant_id, u.state_revision, 'langgraph_checkpoint', NULL, NULL, p_payload, p_actor,
           u.state_revision, u.state_digest, CASE WHEN root THEN p_state END, u.next_step, statement_timestamp()
      FROM u
    RETURNING seq)
  SELECT e.seq, u.suspend_reason INTO result, prior FROM e, u;
  -- A new root checkpoint ends the wait for a person (and for an answer), unless the graph stopped
  -- at an interrupt() on it or a later one (LangGraph writes checkpoints in the background: a later
  -- checkpoint's interrupt can be stored before this one). Only a run that waits or was answered can
  -- have such an interrupt (every interrupt() stored makes the run wait, and a thread that waits for
  -- no one was moved past every interrupt it had), so most puts end above. `prior` is the reason on
  -- the row as the update found it, after any writer that held the row; this statement's snapshot,
  -- taken after the update, sees that writer's interrupt.
  IF root AND prior <> 'langgraph_thread' THEN
    open := EXISTS (SELECT 1 FROM langgraph_writes w
                     WHERE w.tenant_id = p_tenant AND w.thread_id = p_thread AND w.checkpoint_ns = ''
                       AND w.checkpoint_id >= p_checkpoint_id AND w.channel = '__interrupt__');
    UPDATE agent_runs
       SET suspend_reason = CASE WHEN open THEN 'langgraph_interrupt' ELSE 'langgraph_thread' END,
           suspend_detail = CASE WHEN open THEN suspend_detail ELSE '' END
     WHERE run_id = p_run AND tenant_id = p_tenant;
  END IF;
  PERFORM set_config('app.tenant_id', coalesce(previous, ''), true);
  RETURN result;
END $$;
"""
SIGNATURE = "keeper_langgraph_put(uuid, uuid, text, text, text, text, jsonb, jsonb, jsonb, bytea[], jsonb, text, jsonb, text)"
PREVIOUS = import_module("runs.migrations.0015_langgraph_put_function")


class Migration(migrations.Migration):
    dependencies = [("runs", "0024_workflow_schedules")]

    operations = [
        migrations.RunSQL(
            f"DROP FUNCTION {PREVIOUS.SIGNATURE}; {FUNCTION}",
            f"DROP FUNCTION {SIGNATURE}; {PREVIOUS.FUNCTION}",
        )
    ]
