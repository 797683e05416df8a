-- One LangGraph checkpoint in one round trip, as the tenant (for this transaction only): the run's row
-- is locked, channel values stored once per version, the checkpoint row written; a checkpoint someone
-- made (p_payload) also takes the run's next revision with a langgraph_checkpoint event.
CREATE OR REPLACE FUNCTION public.keeper_langgraph_put(p_tenant uuid, p_run uuid, p_thread text, p_ns text, p_checkpoint_id text, p_parent text, p_checkpoint jsonb, p_metadata jsonb, p_blob_keys jsonb, p_blobs bytea[], p_payload jsonb, p_actor text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
  previous text := current_setting('app.tenant_id', true);
  root boolean := p_ns = '';
  prior text;
  touched timestamptz;
  digest text;
  step_next text;
  born timestamptz;
  open boolean := false;
  result bigint;
BEGIN
  PERFORM set_config('app.tenant_id', p_tenant::text, true);
  IF p_payload IS NOT NULL THEN
    -- A checkpoint someone made: the run takes its next revision first (and its row lock), and an
    -- event records the checkpoint below, by whom.
    UPDATE agent_runs r SET state_revision = r.state_revision + 1, updated_at = statement_timestamp()
     WHERE r.run_id = p_run AND r.tenant_id = p_tenant AND r.status = 'suspended'
       AND r.suspend_reason IN ('langgraph_thread', 'langgraph_interrupt', 'langgraph_answered')
       AND NOT r.imported;
  END IF;
  -- The run's row is locked (a graph's own checkpoint does not update it): a cancel or an erasure
  -- that changes it waits for this put and then finds its rows, or goes first and the put stores
  -- nothing (the lock re-reads the row as that writer left it). Channel values are stored once per
  -- version; the checkpoint row is the thread's record of the checkpoint.
  WITH u AS (
    SELECT r.run_id, r.tenant_id, r.state_revision, r.suspend_reason, r.updated_at, r.state_digest,
           r.next_step, r.created_at
      FROM agent_runs r
     WHERE r.run_id = p_run AND r.tenant_id = p_tenant AND r.status = 'suspended'
       AND r.suspend_reason IN ('langgraph_thread', 'langgraph_interrupt', 'langgraph_answered')
       AND NOT r.imported
       FOR NO KEY UPDATE),
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
                  parent_checkpoint_id = EXCLUDED.parent_checkpoint_id)
  SELECT u.state_revision, u.suspend_reason, u.updated_at, u.state_digest, u.next_step, u.created_at
    INTO result, prior, touched, digest, step_next, born FROM u;
  IF p_payload IS NOT NULL AND result IS NOT NULL THEN
    INSERT INTO agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                              state_revision, state_digest, state, next_step, created_at, run_created_at)
    VALUES (p_run, p_tenant, result, 'langgraph_checkpoint', NULL, NULL, p_payload, p_actor, result, digest,
            NULL, step_next, statement_timestamp(), born);
  END IF;
  -- A busy thread shows as active (the console's lists, its live pages) without a write per put.
  IF result IS NOT NULL AND touched < statement_timestamp() - interval '1 minute' THEN
    UPDATE agent_runs SET updated_at = statement_timestamp() WHERE run_id = p_run AND tenant_id = p_tenant;
  END IF;
  -- A new root checkpoint ends the wait for a person (and for an answer), unless the graph stopped
  -- at an interrupt() on it or a later one (LangGraph writes checkpoints in the background: a later
  -- checkpoint's interrupt can be stored before this one). Only a run that waits or was answered can
  -- have such an interrupt (every interrupt() stored makes the run wait, and a thread that waits for
  -- no one was moved past every interrupt it had), so most puts end above. `prior` is the reason on
  -- the row as the lock or update found it, after any writer that held the row; this statement's
  -- snapshot, taken after, sees that writer's interrupt.
  IF root AND prior <> 'langgraph_thread' THEN
    open := EXISTS (SELECT 1 FROM langgraph_writes w
                     WHERE w.tenant_id = p_tenant AND w.thread_id = p_thread AND w.checkpoint_ns = ''
                       AND w.checkpoint_id >= p_checkpoint_id AND w.channel = '__interrupt__');
    UPDATE agent_runs
       SET suspend_reason = CASE WHEN open THEN 'langgraph_interrupt' ELSE 'langgraph_thread' END,
           suspend_detail = CASE WHEN open THEN suspend_detail ELSE '' END,
           updated_at = statement_timestamp()
     WHERE run_id = p_run AND tenant_id = p_tenant;
  END IF;
  PERFORM set_config('app.tenant_id', coalesce(previous, ''), true);
  RETURN result;
END $function$
