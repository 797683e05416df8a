"""Row-level security for the runs app's tables and its narrow cross-tenant functions (used by
migrations 0009, 0010 and 0013; memory and retrieval have their own, single-tenant policy).

The setting holds one tenant id (API keys, workers, services) or, for a console user who belongs to
several tenants, their ids separated by commas. Unset or empty: no row (fail closed).
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


def app_role() -> str:
    return str(settings.DATABASES["default"].get("USER") or "")


def execute_grant(schema_editor: Any, signatures: Iterable[str]) -> None:
    """EXECUTE on each SECURITY DEFINER function for the application role only."""
    app = app_role()
    with schema_editor.connection.cursor() as cursor:
        for signature in signatures:
            cursor.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
            if app:
                cursor.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {schema_editor.quote_name(app)}")


def owner_policies_create(schema_editor: Any, tables: Iterable[str]) -> None:
    """The owner (the migrating role) reads every row through a policy of its own. If the application
    itself migrates (one role, no owner), that policy would open every row to it, so then none is
    made and the sweeps see nothing rather than everything."""
    app = app_role()
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        owner = cursor.fetchone()[0]
        if app and app != owner:
            for table in tables:
                cursor.execute(
                    f"CREATE POLICY owner_maintenance ON {table} TO {schema_editor.quote_name(owner)} "
                    "USING (true) WITH CHECK (true)"
                )


def owner_policies_drop(schema_editor: Any, tables: Iterable[str]) -> None:
    with schema_editor.connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"DROP POLICY IF EXISTS owner_maintenance ON {table}")
