"""Child runs: agent_runs.child_of_run_id, and a trigger that, in the transaction where a child
finishes, records `child_finished` on its parent, fences the parent's step in flight, and asks a
parent waiting for exactly that child to resume (the sweep redispatches it if the wake-up is lost)."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models

TRIGGER = """
CREATE FUNCTION keeper_child_finished() RETURNS trigger
  LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
DECLARE
  p record;
BEGIN
  UPDATE public.agent_runs r
     SET state_revision = r.state_revision + 1, updated_at = statement_timestamp(),
         resume_requested_at = CASE WHEN w.waiting THEN statement_timestamp() ELSE r.resume_requested_at END,
         resume_requested_by = CASE WHEN w.waiting THEN 'child_run' ELSE r.resume_requested_by END,
         wake_at = CASE WHEN w.waiting THEN NULL ELSE r.wake_at END,
         dispatched_at = CASE WHEN w.waiting THEN NULL ELSE r.dispatched_at END
    FROM (SELECT a.run_id, (a.status = 'suspended' AND a.suspend_reason = 'child_run'
                            AND a.suspend_detail = 'waiting for child run ' || NEW.run_id::text) AS waiting
            FROM public.agent_runs a WHERE a.run_id = NEW.child_of_run_id FOR UPDATE) w
   WHERE r.run_id = w.run_id AND r.status IN ('running', 'suspended') AND NOT r.imported
     AND r.suspend_reason IS DISTINCT FROM 'subject_erased'
  RETURNING r.run_id, r.tenant_id, r.state_revision, r.state_digest, r.next_step, w.waiting INTO p;
  IF FOUND THEN
    INSERT INTO public.agent_events (run_id, tenant_id, seq, event_type, step_id, attempt, payload, actor,
                                     state_revision, state_digest, next_step, created_at)
    VALUES (p.run_id, p.tenant_id, p.state_revision, 'child_finished', NULL, NULL,
            jsonb_build_object('child_run_id', NEW.run_id, 'status', NEW.status, 'woke', p.waiting),
            'child:' || NEW.run_id::text, p.state_revision, p.state_digest, p.next_step, statement_timestamp());
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER agent_runs_child_finished AFTER UPDATE OF status ON agent_runs
  FOR EACH ROW WHEN (NEW.child_of_run_id IS NOT NULL AND OLD.status IS DISTINCT FROM NEW.status
                     AND NEW.status IN ('completed', 'failed', 'cancelled'))
  EXECUTE FUNCTION keeper_child_finished();
"""

DROP = """
DROP TRIGGER IF EXISTS agent_runs_child_finished ON agent_runs;
DROP FUNCTION IF EXISTS keeper_child_finished();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0019_webhooks'),
    ]

    operations = [
        migrations.AddField(
            model_name='agentrun',
            name='child_of',
            field=models.ForeignKey(
                blank=True,
                db_column='child_of_run_id',
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name='children',
                to='runs.agentrun',
            ),
        ),
        migrations.RunSQL(TRIGGER, DROP),
    ]
