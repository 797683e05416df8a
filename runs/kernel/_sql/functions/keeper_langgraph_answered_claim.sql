-- LangGraph threads a person answered, waiting for their graph: marked dispatched, ids and tenants only.
CREATE OR REPLACE FUNCTION public.keeper_langgraph_answered_claim(p_grace double precision, p_limit integer)
 RETURNS TABLE(run_id uuid, tenant_id uuid)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public'
AS $function$
    WITH c AS (
      SELECT a.run_id FROM public.agent_runs a
       WHERE a.status = 'suspended' AND a.suspend_reason = 'langgraph_answered' AND NOT a.imported
         AND a.updated_at < statement_timestamp() - make_interval(secs => p_grace)
         AND (a.dispatched_at IS NULL
              OR a.dispatched_at < statement_timestamp() - make_interval(secs => p_grace))
       ORDER BY a.updated_at
       LIMIT p_limit
       FOR UPDATE SKIP LOCKED)
    UPDATE public.agent_runs r SET dispatched_at = statement_timestamp() FROM c WHERE r.run_id = c.run_id
    RETURNING r.run_id, r.tenant_id $function$
