-- Retention of agent_events by whole partitions: a month's partition goes only when it ended before
-- p_cutoff and every run created in that month (whose events are all the partition holds) finished
-- before p_cutoff, as a closed workflow's history leaves after its namespace's retention. A running or
-- suspended run, or one that ended after the cutoff, keeps its month. Answers the outcome and how many
-- runs kept it (p_dry_run: 'would_drop' instead of dropping). Fails rather than drop when its owner cannot see every tenant's runs.
CREATE OR REPLACE FUNCTION public.keeper_events_partition_drop(p_partition text, p_cutoff timestamp with time zone, p_dry_run boolean)
 RETURNS TABLE(outcome text, live_runs bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public'
 SET "TimeZone" TO 'UTC'
AS $function$
DECLARE
  range_from timestamptz;
  range_to timestamptz;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = current_user AND (r.rolsuper OR r.rolbypassrls))
     AND NOT EXISTS (SELECT 1 FROM pg_policies p WHERE p.schemaname = 'public' AND p.tablename = 'agent_runs'
                       AND p.policyname = 'owner_maintenance' AND current_user = ANY(p.roles)) THEN
    RAISE EXCEPTION 'keeper_events_partition_drop: % cannot see every tenant''s runs', current_user;
  END IF;
  IF p_partition !~ '^agent_events_p[0-9]{6}$' OR NOT EXISTS (
       SELECT 1 FROM pg_inherits i WHERE i.inhparent = 'public.agent_events'::regclass
          AND i.inhrelid = to_regclass('public.' || p_partition)) THEN
    outcome := 'not_a_partition'; live_runs := 0; RETURN NEXT; RETURN;
  END IF;
  range_from := to_timestamp(substr(p_partition, 15), 'YYYYMM');
  range_to := range_from + interval '1 month';
  IF range_to > p_cutoff THEN
    outcome := 'not_past_cutoff'; live_runs := 0; RETURN NEXT; RETURN;
  END IF;
  -- No event goes in while the runs are read; a run created in the month never leaves it.
  IF NOT p_dry_run THEN
    EXECUTE format('LOCK TABLE public.%I IN ACCESS EXCLUSIVE MODE', p_partition);
  END IF;
  SELECT count(*) INTO live_runs FROM public.agent_runs a
   WHERE a.created_at >= range_from AND a.created_at < range_to
     AND NOT (a.status IN ('completed', 'failed', 'cancelled') AND a.updated_at < p_cutoff);
  IF live_runs > 0 THEN
    outcome := 'kept'; RETURN NEXT; RETURN;
  END IF;
  IF p_dry_run THEN
    outcome := 'would_drop'; RETURN NEXT; RETURN;
  END IF;
  EXECUTE format('DROP TABLE public.%I', p_partition);
  outcome := 'dropped'; RETURN NEXT;
END $function$
