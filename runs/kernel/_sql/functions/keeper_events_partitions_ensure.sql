-- agent_events' monthly partitions (keeper_partitions_ensure), under the name migration 0039 grants and calls.
CREATE OR REPLACE FUNCTION public.keeper_events_partitions_ensure(p_from timestamp with time zone, p_months_ahead integer)
 RETURNS TABLE(partition_name text, range_from timestamp with time zone, range_to timestamp with time zone, moved bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public'
AS $function$
BEGIN
  RETURN QUERY SELECT * FROM public.keeper_partitions_ensure('agent_events', p_from, p_months_ahead);
END $function$
