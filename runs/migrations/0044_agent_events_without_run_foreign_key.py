"""agent_events keeps no foreign key to agent_runs in the database: its check, a query per event at
every commit, cost the server about 5% of a step's commit. The kernel inserts every event in the
statement that updates its run, and what deletes runs locks them first (runs/kernel/writer.py)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0043_agent_runs_tenant_run_idx"),
    ]

    operations = [
        migrations.AlterField(
            model_name="agentevent",
            name="run",
            field=models.ForeignKey(
                db_column="run_id",
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="events",
                to="runs.agentrun",
            ),
        ),
    ]
