"""console_audit_log becomes a table partitioned by month of its time (`at`), so a retention an
operator chooses (KEEPER_AUDIT_RETENTION_DAYS; unset keeps every entry) drops whole months instead of
deleting rows, which the log's trigger refuses (runs/operator/partitions.py).

The rows are copied into the new table (runs/migrations/_partitioned.py); the primary key becomes
(id, at), and the append-only trigger is carried over (each partition has it). The trigger lets one
more DELETE through: the owner's, moving a month's entries out of the default partition into the
month's own (keeper_partitions_ensure sets keeper.partition_move for that statement alone); the
application role is not the owner, so it cannot. Like runs 0039, the partitioning is not reversed.
"""

from django.db import migrations

from runs.migrations._partitioned import partition_by_month

ALLOW_PARTITION_MOVE = """
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
  IF TG_OP = 'DELETE' AND current_setting('keeper.partition_move', true) = 'on'
     AND current_user = (SELECT r.rolname FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
                          WHERE c.oid = TG_RELID)
  THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'console_audit_log is append-only (% refused)', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END $$
"""

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


def _partition(apps, schema_editor):
    partition_by_month(schema_editor, table="console_audit_log", key="at")


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0007_audit_sort_indexes"),
        ("runs", "0041_webhook_deliveries_partitioned"),
    ]

    operations = [
        migrations.RunPython(_partition, migrations.RunPython.noop),
        migrations.RunSQL(sql=ALLOW_PARTITION_MOVE, reverse_sql=ALLOW_OFFBOARDING),
    ]
