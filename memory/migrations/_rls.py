"""Row-level security for a tenant-scoped table (used by migrations of this app and of retrieval).

FORCE makes the policy bind the table owner too; the application role is neither owner nor
BYPASSRLS. The tenant comes from `SET LOCAL app.tenant_id` (core.tenancy.tenant_scope); unset, the
comparison is NULL and no row is visible or writable (fail closed).
"""

from django.db import migrations

TENANT = "NULLIF(current_setting('app.tenant_id', true), '')::uuid"


def policy(table: str) -> migrations.RunSQL:
    return migrations.RunSQL(
        sql=f"""
            ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
            ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
            CREATE POLICY tenant_isolation ON {table}
                USING (tenant_id = {TENANT}) WITH CHECK (tenant_id = {TENANT});
        """,
        reverse_sql=f"""
            DROP POLICY IF EXISTS tenant_isolation ON {table};
            ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY;
            ALTER TABLE {table} DISABLE ROW LEVEL SECURITY;
        """,
    )
