-- Retention by whole partitions of a table partitioned by month (runs/operator/partitions.py): a
-- month's partition goes only when it ended before p_cutoff and nothing in it is still needed:
--   agent_events: every run created that month (whose events are all the partition holds) finished
--     before p_cutoff, as a closed workflow's history leaves after its namespace's retention;
--   webhook_deliveries: no delivery of that month is still pending (delivered, failed and cancelled
--     ones are records; a pending one is still to be sent);
--   console_audit_log: nothing (its retention is a compliance decision, off unless an operator sets it);
--     only a session of the role that owns the log may drop its months: the application role can
--     delete no audit entry, and retention must not become a way for it to.
-- Answers the outcome and how many rows keep the month (p_dry_run: 'would_drop' instead of dropping).
-- Fails rather than drop events when its owner cannot see every tenant's runs.
CREATE OR REPLACE FUNCTION public.keeper_partition_drop(p_table text, p_partition text, p_cutoff timestamp with time zone, p_dry_run boolean)
 RETURNS TABLE(outcome text, keeping bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public'
 SET "TimeZone" TO 'UTC'
AS $function$
DECLARE
  range_from timestamptz;
  range_to timestamptz;
BEGIN
  IF p_table NOT IN ('agent_events', 'webhook_deliveries', 'console_audit_log') THEN
    RAISE EXCEPTION 'keeper_partition_drop: % is not partitioned by month', p_table;
  END IF;
  IF p_table = 'agent_events'
     AND NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = current_user AND (r.rolsuper OR r.rolbypassrls))
     AND NOT EXISTS (SELECT 1 FROM pg_policies p WHERE p.schemaname = 'public' AND p.tablename = 'agent_runs'
                       AND p.policyname = 'owner_maintenance' AND current_user = ANY(p.roles)) THEN
    RAISE EXCEPTION 'keeper_partition_drop: % cannot see every tenant''s runs', current_user;
  END IF;
  IF p_table = 'console_audit_log' AND NOT EXISTS (
       SELECT 1 FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
        WHERE c.oid = 'public.console_audit_log'::regclass AND r.rolname = session_user)
     AND NOT EXISTS (SELECT 1 FROM pg_roles r WHERE r.rolname = session_user AND r.rolsuper) THEN
    outcome := 'owner_only'; keeping := 0; RETURN NEXT; RETURN;
  END IF;
  IF p_partition !~ ('^' || p_table || '_p[0-9]{6}$') OR NOT EXISTS (
       SELECT 1 FROM pg_inherits i WHERE i.inhparent = ('public.' || p_table)::regclass
          AND i.inhrelid = to_regclass('public.' || p_partition)) THEN
    outcome := 'not_a_partition'; keeping := 0; RETURN NEXT; RETURN;
  END IF;
  range_from := to_timestamp(right(p_partition, 6), 'YYYYMM');
  range_to := range_from + interval '1 month';
  IF range_to > p_cutoff THEN
    outcome := 'not_past_cutoff'; keeping := 0; RETURN NEXT; RETURN;
  END IF;
  -- Nothing goes in or changes while what keeps the month is counted.
  IF NOT p_dry_run THEN
    EXECUTE format('LOCK TABLE public.%I IN ACCESS EXCLUSIVE MODE', p_partition);
  END IF;
  IF p_table = 'agent_events' THEN
    -- A run created in the month never leaves it.
    SELECT count(*) INTO keeping FROM public.agent_runs a
     WHERE a.created_at >= range_from AND a.created_at < range_to
       AND NOT (a.status IN ('completed', 'failed', 'cancelled') AND a.updated_at < p_cutoff);
  ELSIF p_table = 'webhook_deliveries' THEN
    -- The partition itself, every tenant's rows (row-level security is on the table, not its parts).
    EXECUTE format('SELECT count(*) FROM public.%I d WHERE d.status = ''pending''', p_partition) INTO keeping;
  ELSE
    keeping := 0;
  END IF;
  IF keeping > 0 THEN
    outcome := 'kept'; RETURN NEXT; RETURN;
  END IF;
  IF p_dry_run THEN
    outcome := 'would_drop'; RETURN NEXT; RETURN;
  END IF;
  EXECUTE format('DROP TABLE public.%I', p_partition);
  outcome := 'dropped'; RETURN NEXT;
END $function$
