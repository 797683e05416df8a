"""The sweep's narrow path to LangGraph threads whose answer waits for a resume that was lost.

Like keeper_redispatch_claim (0009): a SECURITY DEFINER function owned by the migrating role that
returns ids only, marks what it returns as dispatched, and only the application role may call.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from runs.migrations import _rls

FUNCTION = """
CREATE FUNCTION keeper_langgraph_answered_claim(p_grace double precision, p_limit integer)
  RETURNS TABLE (run_id uuid, tenant_id uuid)
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH c AS (
      SELECT a.run_id FROM public.agent_runs a
       WHERE a.status = 'suspended' AND a.suspend_reason = 'langgraph_answered' AND NOT a.imported
         AND a.updated_at < statement_timestamp() - make_interval(secs => p_grace)
         AND (a.dispatched_at IS NULL
              OR a.dispatched_at < statement_timestamp() - make_interval(secs => p_grace))
       ORDER BY a.updated_at
       LIMIT p_limit
       FOR UPDATE SKIP LOCKED)
    UPDATE public.agent_runs r SET dispatched_at = statement_timestamp() FROM c WHERE r.run_id = c.run_id
    RETURNING r.run_id, r.tenant_id $$;
"""
SIGNATURE = "keeper_langgraph_answered_claim(double precision, integer)"


def _grant(apps: Any, schema_editor: Any) -> None:
    _rls.execute_grant(schema_editor, [SIGNATURE])


class Migration(migrations.Migration):
    dependencies = [("runs", "0012_runs_list_by_creation")]

    operations = [
        migrations.RunSQL(FUNCTION, f"DROP FUNCTION IF EXISTS {SIGNATURE}"),
        migrations.RunPython(_grant, migrations.RunPython.noop),
    ]
