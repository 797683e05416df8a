"""console_audit_log becomes a table partitioned by month of its time (`at`), so a retention an
operator chooses (KEEPER_AUDIT_RETENTION_DAYS; unset keeps every entry) drops whole months instead of
deleting rows, which the log's trigger refuses (runs/operator/partitions.py).

The rows are copied into the new table (runs/migrations/_partitioned.py); the primary key becomes
(id, at), and the append-only trigger is carried over (each partition has it). Like runs 0039, not
reversed.
"""

from django.db import migrations

from runs.migrations._partitioned import partition_by_month


def _partition(apps, schema_editor):
    partition_by_month(schema_editor, table="console_audit_log", key="at")


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0006_memberships_row_level_security"),
        ("runs", "0040_webhook_deliveries_partitioned"),
    ]

    operations = [migrations.RunPython(_partition, migrations.RunPython.noop)]
