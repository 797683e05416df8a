"""API keys under FORCE row-level security, like every table of a tenant's data.

A request's key is resolved before its tenant is known, and an operator revokes a key by its prefix:
each goes through a SECURITY DEFINER function owned by the migrating role that answers with ids only
(the key and its tenant, for the one active key whose prefix and secret's digest match; the tenant of
a prefix), never a digest; everything else reads the table as the key's tenant.
"""

from __future__ import annotations

from django.db import migrations

from core.migrations import _rls

FUNCTIONS = """
CREATE FUNCTION keeper_api_key_resolve(p_prefix text, p_secret_sha256 text)
  RETURNS TABLE (key_id uuid, tenant_id uuid)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT k.key_id, k.tenant_id FROM public.api_keys k
     WHERE k.prefix = p_prefix AND k.secret_sha256 = p_secret_sha256 AND k.revoked_at IS NULL $$;

CREATE FUNCTION keeper_api_key_tenant(p_prefix text) RETURNS uuid
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $$
    SELECT tenant_id FROM public.api_keys WHERE prefix = p_prefix $$;
"""
SIGNATURES = ("keeper_api_key_resolve(text, text)", "keeper_api_key_tenant(text)")


class Migration(migrations.Migration):
    dependencies = [("core", "0004_stored_artifacts")]

    operations = [
        migrations.RunSQL(FUNCTIONS, "DROP FUNCTION " + ", ".join(SIGNATURES)),
        _rls.policy("api_keys"),
        _rls.grants_and_owner_policies(["api_keys"], SIGNATURES),
    ]
