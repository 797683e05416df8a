-- Runs suspended because this deployment lacked their workflow version or step, across tenants: the
-- sweep asks each to resume once a deployment has the code again (only ids and names leave it).
CREATE OR REPLACE FUNCTION public.keeper_code_back_claim(p_limit integer)
 RETURNS TABLE(run_id uuid, tenant_id uuid, workflow_name text, workflow_version text, next_step text,
               suspend_reason text)
 LANGUAGE sql
 STABLE SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public'
AS $function$
    SELECT a.run_id, a.tenant_id, a.workflow_name, a.workflow_version, a.next_step, a.suspend_reason
      FROM public.agent_runs a
     WHERE a.status = 'suspended' AND a.suspend_reason IN ('workflow_version_unavailable', 'unknown_step')
       AND a.resume_requested_at IS NULL AND NOT a.imported
     ORDER BY a.updated_at
     LIMIT p_limit $function$
