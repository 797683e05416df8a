"""The audit log stays append-only, with a second exception: a tenant's offboarding deletes its entries.

A DELETE goes through only for a row whose tenant has an offboarding in status 'erasing' (a row in
tenant_offboardings, kept after the tenant is gone, whose receipt counts the entries deleted and
names the digest of the export that holds them). Everything else still raises, as in 0003.
"""

from django.db import migrations

ALLOW_OFFBOARDING = """
CREATE OR REPLACE FUNCTION console_audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE'
     AND NEW.note = '[erased]'
     AND (NEW.id, NEW.at, NEW.actor, NEW.action, NEW.target_type, NEW.target_id, NEW.remote_addr)
         IS NOT DISTINCT FROM (OLD.id, OLD.at, OLD.actor, OLD.action, OLD.target_type, OLD.target_id,
                               OLD.remote_addr)
     AND NEW.tenant_id IS NOT DISTINCT FROM OLD.tenant_id
     AND NEW.details - 'note_erased_by' = OLD.details - 'note_erased_by'
     AND jsonb_typeof(NEW.details -> 'note_erased_by') = 'string'
  THEN
    RETURN NEW;
  END IF;
  IF TG_OP = 'DELETE' AND OLD.tenant_id IS NOT NULL AND EXISTS (
       SELECT 1 FROM tenant_offboardings o WHERE o.tenant_id = OLD.tenant_id AND o.status = 'erasing')
  THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'console_audit_log is append-only (% refused)', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$
"""

ALLOW_NOTE_ERASURE = """
CREATE OR REPLACE FUNCTION console_audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE'
     AND NEW.note = '[erased]'
     AND (NEW.id, NEW.at, NEW.actor, NEW.action, NEW.target_type, NEW.target_id, NEW.remote_addr)
         IS NOT DISTINCT FROM (OLD.id, OLD.at, OLD.actor, OLD.action, OLD.target_type, OLD.target_id,
                               OLD.remote_addr)
     AND NEW.tenant_id IS NOT DISTINCT FROM OLD.tenant_id
     AND NEW.details - 'note_erased_by' = OLD.details - 'note_erased_by'
     AND jsonb_typeof(NEW.details -> 'note_erased_by') = 'string'
  THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION 'console_audit_log is append-only (% refused)', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$
"""


class Migration(migrations.Migration):
    dependencies = [("console", "0004_audit_entry_plural"), ("core", "0003_tenant_offboardings")]
    operations = [migrations.RunSQL(sql=ALLOW_OFFBOARDING, reverse_sql=ALLOW_NOTE_ERASURE)]
