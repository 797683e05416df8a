"""Run data under FORCE row-level security, like memory and retrieval; the narrow cross-tenant path.

agent_events gets its own tenant_id (backfilled from its run; the hot path writes it from the run
row it updates in the same statement), so every policy is the one-column comparison. The sweeps
and operator commands that must look across tenants call SECURITY DEFINER functions owned by the
migrating (owner) role that return ids, tenant ids and counts only; the owner reads every row
through a policy granted to it alone (the application role's only policy stays fail-closed).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models

from runs.migrations import _rls


TABLES = ("agent_runs", "agent_events", "tool_operations", "approvals", "summaries")

# Each returns ids, tenant ids or counts, never content. search_path is pinned so a caller cannot
# shadow a table or an operator with its own schema.
FUNCTIONS = """
CREATE FUNCTION keeper_run_tenant(p_run_id uuid) RETURNS uuid
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT tenant_id FROM public.agent_runs WHERE run_id = p_run_id $$;

CREATE FUNCTION keeper_redispatch_claim(p_grace double precision, p_limit integer)
  RETURNS TABLE (run_id uuid, tenant_id uuid)
  LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    WITH c AS (
      SELECT a.run_id FROM public.agent_runs a
       WHERE (a.status = 'running' OR (a.status = 'suspended' AND a.resume_requested_at IS NOT NULL))
         AND NOT a.imported
         AND (a.lease_owner IS NULL OR a.lease_expires_at < statement_timestamp())
         AND (a.wake_at IS NULL OR a.wake_at <= statement_timestamp())
         AND a.updated_at < statement_timestamp() - make_interval(secs => p_grace)
         AND (a.dispatched_at IS NULL
              OR a.dispatched_at < statement_timestamp() - make_interval(secs => p_grace))
       ORDER BY a.updated_at
       LIMIT p_limit
       FOR UPDATE SKIP LOCKED)
    UPDATE public.agent_runs r SET dispatched_at = statement_timestamp() FROM c WHERE r.run_id = c.run_id
    RETURNING r.run_id, r.tenant_id $$;

CREATE FUNCTION keeper_forks_expired() RETURNS TABLE (run_id uuid, tenant_id uuid)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT run_id, tenant_id FROM public.agent_runs
     WHERE status = 'suspended' AND suspend_reason = 'fork_not_started' AND NOT imported
       AND resume_requested_at IS NULL AND fork_expires_at < statement_timestamp() $$;

CREATE FUNCTION keeper_run_tenants() RETURNS TABLE (tenant_id uuid)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT DISTINCT tenant_id FROM public.agent_runs $$;

CREATE FUNCTION keeper_run_status_counts() RETURNS TABLE (status text, runs bigint)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT status, count(*) FROM public.agent_runs GROUP BY status $$;

CREATE FUNCTION keeper_operation_status_counts() RETURNS TABLE (status text, operations bigint)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT status, count(*) FROM public.tool_operations GROUP BY status $$;

CREATE FUNCTION keeper_lease_takeover_count() RETURNS bigint
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT count(*) FROM public.agent_events
     WHERE event_type = 'resume_verified' AND payload->>'trigger' = 'lease_takeover' $$;
"""
FUNCTION_SIGNATURES = (
    "keeper_run_tenant(uuid)",
    "keeper_redispatch_claim(double precision, integer)",
    "keeper_forks_expired()",
    "keeper_run_tenants()",
    "keeper_run_status_counts()",
    "keeper_operation_status_counts()",
    "keeper_lease_takeover_count()",
)


def _grants_and_owner_policies(apps: Any, schema_editor: Any) -> None:
    """EXECUTE only for the application role; the owner (this migration's role) reads through its
    own policy (runs/migrations/_rls.py says when none is made)."""
    _rls.execute_grant(schema_editor, FUNCTION_SIGNATURES)
    _rls.owner_policies_create(schema_editor, TABLES)


def _drop_owner_policies(apps: Any, schema_editor: Any) -> None:
    _rls.owner_policies_drop(schema_editor, TABLES)


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_initial"),
        ("runs", "0008_run_imported"),
    ]

    operations = [
        migrations.AddField(model_name="agentevent", name="tenant_id", field=models.UUIDField(null=True)),
        migrations.RunSQL(
            "UPDATE agent_events e SET tenant_id = r.tenant_id FROM agent_runs r WHERE r.run_id = e.run_id",
            migrations.RunSQL.noop,
        ),
        migrations.AlterField(model_name="agentevent", name="tenant_id", field=models.UUIDField()),
        migrations.RunSQL(FUNCTIONS, "DROP FUNCTION " + ", ".join(FUNCTION_SIGNATURES)),
        *(_rls.policy(table) for table in TABLES),
        migrations.RunPython(_grants_and_owner_policies, _drop_owner_policies),
    ]
