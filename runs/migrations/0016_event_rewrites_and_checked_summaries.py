"""Events count their own rewrites (a trigger), so a summary re-checks its source only after one.

The context builder used to digest every summarized event on every turn; now a summary whose range
has the same rewrite count as when it was last checked is trusted, and only a changed range is read.
"""

from django.db import migrations, models

TRIGGER = """
CREATE FUNCTION keeper_agent_event_rewritten() RETURNS trigger
  LANGUAGE plpgsql SET search_path = pg_catalog, public AS $$
BEGIN
  IF NEW.payload IS DISTINCT FROM OLD.payload OR NEW.event_type IS DISTINCT FROM OLD.event_type
     OR NEW.seq IS DISTINCT FROM OLD.seq OR NEW.run_id IS DISTINCT FROM OLD.run_id THEN
    NEW.rewrites := OLD.rewrites + 1;
  ELSE
    NEW.rewrites := OLD.rewrites;  -- the count is the trigger's alone: no UPDATE may lower it
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER agent_events_rewritten BEFORE UPDATE ON agent_events
  FOR EACH ROW EXECUTE FUNCTION keeper_agent_event_rewritten();
"""
UNDO = """
DROP TRIGGER IF EXISTS agent_events_rewritten ON agent_events;
DROP FUNCTION IF EXISTS keeper_agent_event_rewritten();
"""


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0015_langgraph_put_function'),
    ]

    operations = [
        migrations.AddField(
            model_name='agentevent',
            name='rewrites',
            field=models.IntegerField(db_default=0),
        ),
        migrations.AddField(
            model_name='summary',
            name='rewrites_checked',
            field=models.BigIntegerField(default=-1),
        ),
        migrations.AddField(
            model_name='summary',
            name='unsupported_facts',
            field=models.JSONField(default=list),
        ),
        migrations.AddIndex(
            model_name='agentevent',
            index=models.Index(condition=models.Q(('rewrites__gt', 0)), fields=['run', 'seq'], name='agent_events_rewritten'),
        ),
        migrations.RunSQL(TRIGGER, UNDO),
    ]
