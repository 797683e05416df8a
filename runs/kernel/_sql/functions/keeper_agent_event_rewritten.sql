-- Trigger on agent_events: an event counts its own rewrites (erasure redacts payloads), so a summary
-- re-checks its source only after one. It changes only the row being written.
CREATE OR REPLACE FUNCTION public.keeper_agent_event_rewritten()
 RETURNS trigger
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'public'
AS $function$
BEGIN
  IF NEW.payload IS DISTINCT FROM OLD.payload OR NEW.event_type IS DISTINCT FROM OLD.event_type
     OR NEW.seq IS DISTINCT FROM OLD.seq OR NEW.run_id IS DISTINCT FROM OLD.run_id THEN
    NEW.rewrites := OLD.rewrites + 1;
  ELSE
    NEW.rewrites := OLD.rewrites;  -- the count is the trigger's alone: no UPDATE may lower it
  END IF;
  RETURN NEW;
END $function$
