"""Row-level security for core's and the console's tenant tables (api_keys, console_memberships) and
their narrow SECURITY DEFINER functions: the runs app's pattern (runs/migrations/_rls.py), here
because core imports no app.

The setting holds one tenant id or, for a console user of several tenants (the admin), their ids
separated by commas. Unset or empty: no row (fail closed).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.db import migrations

TENANTS = "string_to_array(NULLIF(current_setting('app.tenant_id', true), ''), ',')::uuid[]"


def policy(table: str) -> migrations.RunSQL:
    return migrations.RunSQL(
        sql=f"""
            ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
            ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
            CREATE POLICY tenant_isolation ON {table}
                USING (tenant_id = ANY({TENANTS})) WITH CHECK (tenant_id = ANY({TENANTS}));
        """,
        reverse_sql=f"""
            DROP POLICY IF EXISTS tenant_isolation ON {table};
            ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY;
            ALTER TABLE {table} DISABLE ROW LEVEL SECURITY;
        """,
    )


def _app_role() -> str:
    return str(settings.DATABASES["default"].get("USER") or "")


def grants_and_owner_policies(tables: Iterable[str], signatures: Iterable[str]) -> migrations.RunPython:
    """EXECUTE on each function for the application role only; the owner (the migrating role) reads
    every row through a policy of its own, unless the application itself migrates (one role), when
    that policy would open every row to it."""
    tables, signatures = tuple(tables), tuple(signatures)

    def forward(apps: Any, schema_editor: Any) -> None:
        app = _app_role()
        with schema_editor.connection.cursor() as cursor:
            for signature in signatures:
                cursor.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
                if app:
                    cursor.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {schema_editor.quote_name(app)}")
            cursor.execute("SELECT current_user")
            owner = cursor.fetchone()[0]
            if app and app != owner:
                for table in tables:
                    cursor.execute(
                        f"CREATE POLICY owner_maintenance ON {table} TO {schema_editor.quote_name(owner)} "
                        "USING (true) WITH CHECK (true)"
                    )

    def backward(apps: Any, schema_editor: Any) -> None:
        with schema_editor.connection.cursor() as cursor:
            for table in tables:
                cursor.execute(f"DROP POLICY IF EXISTS owner_maintenance ON {table}")

    return migrations.RunPython(forward, backward)
