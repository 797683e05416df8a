-- The monthly range partitions of a table partitioned by time (runs/operator/partitions.py lists them:
-- agent_events, webhook_deliveries, console_audit_log). This makes each month from p_from (or the
-- oldest row the default partition holds) to p_months_ahead months past now a partition of its own,
-- moving any rows the default partition holds for that month into it (an insert never fails for want
-- of a partition: it lands in the default one until then). Partitions are reached only through their
-- table, whose row-level security and grants apply: nobody else is granted them.
CREATE OR REPLACE FUNCTION public.keeper_partitions_ensure(p_table text, p_from timestamp with time zone, p_months_ahead integer)
 RETURNS TABLE(partition_name text, range_from timestamp with time zone, range_to timestamp with time zone, moved bigint)
 LANGUAGE plpgsql
 SECURITY DEFINER
 SET search_path TO 'pg_catalog', 'public'
 SET "TimeZone" TO 'UTC'
AS $function$
DECLARE
  month timestamptz;
  last_month timestamptz := date_trunc('month', statement_timestamp()) + make_interval(months => greatest(p_months_ahead, 0));
  default_partition text := p_table || '_default';
  key text;
  oldest timestamptz;
  grantee text;
BEGIN
  IF p_table NOT IN ('agent_events', 'webhook_deliveries', 'console_audit_log') THEN
    RAISE EXCEPTION 'keeper_partitions_ensure: % is not partitioned by month', p_table;
  END IF;
  SELECT a.attname INTO key FROM pg_partitioned_table t
    JOIN pg_attribute a ON a.attrelid = t.partrelid AND a.attnum = t.partattrs[0]
   WHERE t.partrelid = to_regclass('public.' || p_table) AND t.partstrat = 'r';
  IF key IS NULL THEN
    RAISE EXCEPTION 'keeper_partitions_ensure: % is not partitioned by range', p_table;
  END IF;
  EXECUTE format('SELECT min(d.%I) FROM public.%I d', key, default_partition) INTO oldest;
  month := date_trunc('month', least(coalesce(p_from, statement_timestamp()), statement_timestamp(), oldest));
  WHILE month <= last_month LOOP
    partition_name := p_table || '_p' || to_char(month, 'YYYYMM');
    range_from := month;
    range_to := month + interval '1 month';
    moved := 0;
    IF to_regclass('public.' || partition_name) IS NULL THEN
      -- Writers wait while the month's rows leave the default partition; readers do not.
      EXECUTE format('LOCK TABLE public.%I IN EXCLUSIVE MODE', default_partition);
      EXECUTE format('SELECT count(*) FROM public.%I d WHERE d.%I >= $1 AND d.%I < $2',
                     default_partition, key, key) INTO moved USING range_from, range_to;
      IF moved > 0 THEN
        EXECUTE format('CREATE TABLE public.%I (LIKE public.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                       partition_name, p_table);
        -- A move, not a deletion: the audit log's trigger, which refuses every DELETE, lets the
        -- table's owner (this function's) through while this is set.
        PERFORM set_config('keeper.partition_move', 'on', true);
        EXECUTE format('WITH m AS (DELETE FROM public.%I d WHERE d.%I >= $1 AND d.%I < $2 RETURNING d.*)'
                       ' INSERT INTO public.%I SELECT * FROM m',
                       default_partition, key, key, partition_name) USING range_from, range_to;
        GET DIAGNOSTICS moved = ROW_COUNT;
        PERFORM set_config('keeper.partition_move', '', true);
        EXECUTE format('ALTER TABLE public.%I ATTACH PARTITION public.%I FOR VALUES FROM (%L) TO (%L)',
                       p_table, partition_name, range_from, range_to);
      ELSE
        EXECUTE format('CREATE TABLE public.%I PARTITION OF public.%I FOR VALUES FROM (%L) TO (%L)',
                       partition_name, p_table, range_from, range_to);
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
