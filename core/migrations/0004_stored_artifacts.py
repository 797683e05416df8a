"""Stored artifacts (core/artifacts/): a record per tenant and digest under FORCE row-level security
(the runs tables' policy: a console user's setting may name several tenants), and the sweep's two
narrow cross-tenant functions, for the application role only."""

from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

TENANTS = "string_to_array(NULLIF(current_setting('app.tenant_id', true), ''), ',')::uuid[]"

RLS = f"""
ALTER TABLE stored_artifacts ENABLE ROW LEVEL SECURITY;
ALTER TABLE stored_artifacts FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON stored_artifacts
    USING (tenant_id = ANY({TENANTS})) WITH CHECK (tenant_id = ANY({TENANTS}));
"""
NO_RLS = """
DROP POLICY IF EXISTS tenant_isolation ON stored_artifacts;
ALTER TABLE stored_artifacts NO FORCE ROW LEVEL SECURITY;
ALTER TABLE stored_artifacts DISABLE ROW LEVEL SECURITY;
"""

# Records no put touched for the grace period (ids only), those checked longest ago first; and whether
# another record names the same object (blobs stored before keys carried the tenant are shared).
FUNCTIONS = """
CREATE FUNCTION keeper_artifacts_reclaimable(p_grace double precision, p_limit integer)
  RETURNS TABLE (id bigint, tenant_id uuid)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT a.id, a.tenant_id FROM public.stored_artifacts a
     WHERE a.touched_at < statement_timestamp() - make_interval(secs => p_grace)
     ORDER BY a.checked_at ASC NULLS FIRST, a.id LIMIT p_limit $$;
CREATE FUNCTION keeper_artifact_key_shared(p_store text, p_key text, p_except bigint)
  RETURNS boolean
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT EXISTS (SELECT 1 FROM public.stored_artifacts a
                    WHERE a.store = p_store AND a.key = p_key AND a.id <> p_except) $$;
"""
SIGNATURES = (
    "keeper_artifacts_reclaimable(double precision, integer)",
    "keeper_artifact_key_shared(text, text, bigint)",
)


def _grants_and_owner_policy(apps: Any, schema_editor: Any) -> None:
    """EXECUTE for the application role only; the owner reads through a policy of its own unless the
    application itself migrates (then none: the sweeps see nothing rather than everything)."""
    app = str(settings.DATABASES["default"].get("USER") or "")
    with schema_editor.connection.cursor() as cursor:
        for signature in SIGNATURES:
            cursor.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
            if app:
                cursor.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {schema_editor.quote_name(app)}")
        cursor.execute("SELECT current_user")
        owner = cursor.fetchone()[0]
        if app and app != owner:
            cursor.execute(
                f"CREATE POLICY owner_maintenance ON stored_artifacts TO {schema_editor.quote_name(owner)} "
                "USING (true) WITH CHECK (true)"
            )


def _drop_owner_policy(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("DROP POLICY IF EXISTS owner_maintenance ON stored_artifacts")


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0003_tenant_offboardings'),
    ]

    operations = [
        migrations.CreateModel(
            name='StoredArtifact',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('digest', models.CharField(max_length=71)),
                ('store', models.CharField(max_length=16)),
                ('key', models.CharField(max_length=200)),
                ('size', models.BigIntegerField()),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('touched_at', models.DateTimeField(auto_now_add=True)),
                ('checked_at', models.DateTimeField(blank=True, null=True)),
                ('tenant', models.ForeignKey(db_column='tenant_id', on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
            ],
            options={
                'db_table': 'stored_artifacts',
                'indexes': [models.Index(models.OrderBy(models.F('checked_at'), nulls_first=True), models.F('id'), name='stored_artifacts_sweep_idx'), models.Index(fields=['store', 'key'], name='stored_artifacts_key_idx')],
                'constraints': [models.UniqueConstraint(fields=('tenant', 'digest'), name='stored_artifacts_tenant_digest'), models.CheckConstraint(condition=models.Q(('digest__regex', '^sha256:[0-9a-f]{64}$')), name='stored_artifacts_digest'), models.CheckConstraint(condition=models.Q(('size__gte', 0)), name='stored_artifacts_size')],
            },
        ),
        migrations.RunSQL(RLS, NO_RLS),
        migrations.RunSQL(FUNCTIONS, "; ".join(f"DROP FUNCTION IF EXISTS {s}" for s in SIGNATURES)),
        migrations.RunPython(_grants_and_owner_policy, _drop_owner_policy),
    ]
