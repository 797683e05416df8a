-- Retention of one month of agent_events (keeper_partition_drop), under the name migration 0039 grants.
CREATE OR REPLACE FUNCTION public.keeper_events_partition_drop(p_partition text, p_cutoff timestamp with time zone, p_dry_run boolean)
 RETURNS TABLE(outcome text, live_runs bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public'
AS $function$
BEGIN
  RETURN QUERY SELECT * FROM public.keeper_partition_drop('agent_events', p_partition, p_cutoff, p_dry_run);
END $function$
