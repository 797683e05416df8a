"""webhook_deliveries becomes a table partitioned by month of created_at, so retention drops whole
months of delivered, failed and cancelled deliveries instead of deleting rows (runs/operator/partitions.py).

The rows are copied into the new table (runs/migrations/_partitioned.py). Its primary key becomes
(id, created_at) and the once-per-subscription key (subscription_id, event_id, created_at): PostgreSQL
wants the partition key in both. A run's event has one delivery per subscription by construction (its
event id is the run's revision, written once); an erasure's outcome is told once under a lock
(runs/webhooks/services.py). Like 0039, not reversed.
"""

from django.db import migrations, models

from runs.migrations._partitioned import partition_by_month


def _partition(apps, schema_editor):
    partition_by_month(schema_editor, table="webhook_deliveries", key="created_at")


class Migration(migrations.Migration):
    dependencies = [("runs", "0040_run_list_sort_indexes")]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(_partition, migrations.RunPython.noop)],
            state_operations=[
                migrations.RemoveConstraint(model_name="webhookdelivery", name="webhook_deliveries_once"),
                migrations.AddConstraint(
                    model_name="webhookdelivery",
                    constraint=models.UniqueConstraint(
                        fields=("subscription", "event_id", "created_at"), name="webhook_deliveries_once"
                    ),
                ),
            ],
        ),
    ]
