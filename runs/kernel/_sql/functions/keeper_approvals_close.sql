-- Trigger on agent_runs: a run that ends (or whose subject is erased) closes its pending approvals,
-- so no inbox offers a decision nothing waits for. It writes approvals only, never the run tables.
CREATE OR REPLACE FUNCTION public.keeper_approvals_close()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'public'
AS $function$
BEGIN
  UPDATE approvals a SET status = 'expired', decided_by = 'keeper', decided_at = statement_timestamp(),
         note = (SELECT CASE WHEN r.suspend_reason = 'subject_erased' THEN 'closed: the subject of the run was erased' WHEN r.status = 'cancelled' THEN 'closed: the run was cancelled' WHEN r.status = 'failed' THEN 'closed: the run failed' ELSE 'closed: the run completed' END FROM (SELECT NEW.status, NEW.suspend_reason) AS r(status, suspend_reason))
   WHERE a.run_id = NEW.run_id AND a.status = 'pending';
  RETURN NULL;
END $function$
