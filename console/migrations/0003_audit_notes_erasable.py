"""The audit log stays append-only, with one exception: erasure may blank a note.

A staff note about a customer's run ("checked with the customer at Elm Road 77") is that customer's
data. The trigger lets an UPDATE through only when nothing but the note changes, the new note is the
erasure marker, and details gain only the erasure request that did it; anything else still raises.
"""

from django.db import migrations

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

APPEND_ONLY = """
CREATE OR REPLACE FUNCTION console_audit_log_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'console_audit_log is append-only (% refused)', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$
"""


class Migration(migrations.Migration):
    dependencies = [("console", "0002_audit_log_append_only")]
    operations = [migrations.RunSQL(sql=ALLOW_NOTE_ERASURE, reverse_sql=APPEND_ONLY)]
