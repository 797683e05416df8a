"""Console memberships under FORCE row-level security, like every table of a tenant's data.

Which tenants a signed-in user belongs to is asked before any tenant is bound: a SECURITY DEFINER
function owned by the migrating role answers with the user's tenant ids and nothing else. Deleting a
user removes its memberships in every tenant through the foreign key (ON DELETE CASCADE, which
PostgreSQL applies past row-level security), where Django's own cascade sees only the bound tenants'.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

from core.migrations import _rls

FUNCTIONS = """
CREATE FUNCTION keeper_user_tenants(p_user_id bigint) RETURNS SETOF uuid
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT tenant_id FROM public.console_memberships WHERE user_id = p_user_id $$;
"""
SIGNATURES = ("keeper_user_tenants(bigint)",)


def _user_key_cascades(apps: Any, schema_editor: Any, *, cascade: bool = True) -> None:
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            """SELECT conname FROM pg_constraint
                WHERE conrelid = 'console_memberships'::regclass AND contype = 'f'
                  AND confrelid = 'auth_user'::regclass"""
        )
        (name,) = cursor.fetchone()
        cursor.execute(f'ALTER TABLE console_memberships DROP CONSTRAINT "{name}"')
        cursor.execute(
            f'ALTER TABLE console_memberships ADD CONSTRAINT "{name}" FOREIGN KEY (user_id) '
            f"REFERENCES auth_user(id) {'ON DELETE CASCADE ' if cascade else ''}DEFERRABLE INITIALLY DEFERRED"
        )


def _user_key_restores(apps: Any, schema_editor: Any) -> None:
    _user_key_cascades(apps, schema_editor, cascade=False)


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0005_audit_tenant_offboarding"),
        ("core", "0005_api_keys_row_level_security"),
    ]

    operations = [
        migrations.RunSQL(FUNCTIONS, "DROP FUNCTION " + ", ".join(SIGNATURES)),
        _rls.policy("console_memberships"),
        _rls.grants_and_owner_policies(["console_memberships"], SIGNATURES),
        migrations.RunPython(_user_key_cascades, _user_key_restores),
    ]
