"""The fork TTL's narrow path to started forks left suspended (waiting for what nobody gives).

Like keeper_forks_expired (0009): a SECURITY DEFINER function owned by the migrating role that
returns ids (and the revision the cancel is fenced by) only, and only the application role may call.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from runs.migrations import _rls

FUNCTION = """
CREATE FUNCTION keeper_forks_abandoned(p_ttl double precision)
  RETURNS TABLE (run_id uuid, tenant_id uuid, state_revision bigint)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT run_id, tenant_id, state_revision FROM public.agent_runs
     WHERE parent_run_id IS NOT NULL AND status = 'suspended' AND NOT imported
       AND suspend_reason IS DISTINCT FROM 'fork_not_started'
       AND suspend_reason IS DISTINCT FROM 'subject_erased'
       AND resume_requested_at IS NULL AND wake_at IS NULL
       AND updated_at < statement_timestamp() - make_interval(secs => p_ttl) $$;
"""
SIGNATURE = "keeper_forks_abandoned(double precision)"


def _grant(apps: Any, schema_editor: Any) -> None:
    _rls.execute_grant(schema_editor, [SIGNATURE])


class Migration(migrations.Migration):
    dependencies = [("runs", "0020_child_runs")]

    operations = [
        migrations.RunSQL(FUNCTION, f"DROP FUNCTION IF EXISTS {SIGNATURE}"),
        migrations.RunPython(_grant, migrations.RunPython.noop),
    ]
