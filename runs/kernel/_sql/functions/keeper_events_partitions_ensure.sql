-- agent_events is partitioned by month of run_created_at (its run's creation time). This makes each
-- month from p_from (or the oldest row the default partition holds) to p_months_ahead months past now
-- a partition of its own, moving any rows the default partition holds for that month into it (an
-- insert never fails for want of a partition: it lands in the default one until then). Partitions are
-- reached only through agent_events, whose row-level security filters them: nobody else is granted them.
CREATE OR REPLACE FUNCTION public.keeper_events_partitions_ensure(p_from timestamp with time zone, p_months_ahead integer)
 RETURNS TABLE(partition_name text, range_from timestamp with time zone, range_to timestamp with time zone, moved bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public'
 SET "TimeZone" TO 'UTC'
AS $function$
DECLARE
  month timestamptz;
  last_month timestamptz := date_trunc('month', statement_timestamp()) + make_interval(months => greatest(p_months_ahead, 0));
  grantee text;
BEGIN
  month := date_trunc('month', least(coalesce(p_from, statement_timestamp()), statement_timestamp(),
                                     (SELECT min(d.run_created_at) FROM public.agent_events_default d)));
  WHILE month <= last_month LOOP
    partition_name := 'agent_events_p' || to_char(month, 'YYYYMM');
    range_from := month;
    range_to := month + interval '1 month';
    moved := 0;
    IF to_regclass('public.' || partition_name) IS NULL THEN
      -- Writers wait while the month's rows leave the default partition; readers do not.
      LOCK TABLE public.agent_events_default IN EXCLUSIVE MODE;
      IF EXISTS (SELECT 1 FROM public.agent_events_default d
                  WHERE d.run_created_at >= range_from AND d.run_created_at < range_to) THEN
        EXECUTE format('CREATE TABLE public.%I (LIKE public.agent_events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                       partition_name);
        EXECUTE format('WITH m AS (DELETE FROM public.agent_events_default d WHERE d.run_created_at >= $1'
                       ' AND d.run_created_at < $2 RETURNING d.*) INSERT INTO public.%I SELECT * FROM m',
                       partition_name) USING range_from, range_to;
        GET DIAGNOSTICS moved = ROW_COUNT;
        EXECUTE format('ALTER TABLE public.agent_events ATTACH PARTITION public.%I FOR VALUES FROM (%L) TO (%L)',
                       partition_name, range_from, range_to);
      ELSE
        EXECUTE format('CREATE TABLE public.%I PARTITION OF public.agent_events FOR VALUES FROM (%L) TO (%L)',
                       partition_name, range_from, range_to);
      END IF;
      FOR grantee IN SELECT a.grantee::regrole::text FROM pg_class c, aclexplode(c.relacl) a
                      WHERE c.oid = ('public.' || partition_name)::regclass AND a.grantee <> c.relowner
                        AND a.grantee <> 0 GROUP BY a.grantee LOOP
        EXECUTE format('REVOKE ALL ON public.%I FROM %s', partition_name, grantee);
      END LOOP;
      RETURN NEXT;
    END IF;
    month := month + interval '1 month';
  END LOOP;
END $function$
