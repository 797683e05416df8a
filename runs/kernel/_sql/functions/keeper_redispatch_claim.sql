-- The sweep's claim across tenants: running runs nobody holds and nobody woke lately, marked
-- dispatched now (only ids and tenants leave it). Runs of external workflows are their workers' to claim.
CREATE OR REPLACE FUNCTION public.keeper_redispatch_claim(p_grace double precision, p_limit integer)
 RETURNS TABLE(run_id uuid, tenant_id uuid)
 LANGUAGE sql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public'
AS $function$
    WITH c AS (
      SELECT a.run_id FROM public.agent_runs a
       WHERE (a.status = 'running' OR (a.status = 'suspended' AND a.resume_requested_at IS NOT NULL))
         AND NOT a.imported
         AND NOT EXISTS (SELECT 1 FROM public.external_workflows w WHERE w.tenant_id = a.tenant_id
                           AND w.name = a.workflow_name AND w.version = a.workflow_version)
         AND (a.lease_owner IS NULL OR a.lease_expires_at < statement_timestamp())
         AND (a.wake_at IS NULL OR a.wake_at <= statement_timestamp())
         AND a.updated_at < statement_timestamp() - make_interval(secs => p_grace)
         AND (a.dispatched_at IS NULL
              OR a.dispatched_at < statement_timestamp() - make_interval(secs => p_grace))
       ORDER BY a.updated_at
       LIMIT p_limit
       FOR UPDATE SKIP LOCKED)
    UPDATE public.agent_runs r SET dispatched_at = statement_timestamp() FROM c WHERE r.run_id = c.run_id
    RETURNING r.run_id, r.tenant_id $function$
