"""Workspace snapshots (runs/engine/workspace.py): a manifest per snapshot under FORCE row-level
security like the run tables, and the TTL sweep's narrow cross-tenant view of the reclaimable ones."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

from runs.migrations import _rls

TABLES = ("workspace_snapshots",)

# Snapshots of finished runs older than the TTL (ids only), and the digests every other snapshot
# still names (a blob one of them refers to stays): SECURITY DEFINER, the application role only.
FUNCTIONS = """
CREATE FUNCTION keeper_workspace_reclaimable(p_ttl double precision, p_limit integer)
  RETURNS TABLE (id bigint, tenant_id uuid)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT s.id, s.tenant_id FROM public.workspace_snapshots s JOIN public.agent_runs r USING (run_id)
     WHERE r.status IN ('completed', 'failed', 'cancelled')
       AND r.updated_at < statement_timestamp() - make_interval(secs => p_ttl)
     ORDER BY s.id LIMIT p_limit $$;
CREATE FUNCTION keeper_workspace_digests_in_use(p_digests text[], p_except_runs uuid[])
  RETURNS TABLE (digest text)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT DISTINCT f.value ->> 'digest' FROM public.workspace_snapshots s,
           LATERAL jsonb_each(s.manifest) f
     WHERE f.value ->> 'digest' = ANY(p_digests) AND NOT s.run_id = ANY(p_except_runs) $$;
"""
SIGNATURES = (
    "keeper_workspace_reclaimable(double precision, integer)",
    "keeper_workspace_digests_in_use(text[], uuid[])",
)


def _owner_policies(apps: Any, schema_editor: Any) -> None:
    _rls.owner_policies_create(schema_editor, TABLES)
    _rls.execute_grant(schema_editor, SIGNATURES)


def _drop_owner_policies(apps: Any, schema_editor: Any) -> None:
    _rls.owner_policies_drop(schema_editor, TABLES)


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0002_api_keys'),
        ('runs', '0022_external_workflow_signals'),
    ]

    operations = [
        migrations.CreateModel(
            name='WorkspaceSnapshot',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('seq', models.BigIntegerField()),
                ('reason', models.TextField()),
                ('manifest', models.JSONField(default=dict)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('run', models.ForeignKey(db_column='run_id', on_delete=django.db.models.deletion.CASCADE, to='runs.agentrun')),
                ('tenant', models.ForeignKey(db_column='tenant_id', on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
            ],
            options={
                'db_table': 'workspace_snapshots',
                'constraints': [models.UniqueConstraint(fields=('run', 'seq'), name='workspace_snapshots_run_seq')],
            },
        ),
        *(_rls.policy(table) for table in TABLES),
        migrations.RunSQL(FUNCTIONS, "; ".join(f"DROP FUNCTION IF EXISTS {s}" for s in SIGNATURES)),
        migrations.RunPython(_owner_policies, _drop_owner_policies),
    ]
