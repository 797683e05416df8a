"""External workflows (runs/external/): a tenant's registered workflows whose steps outside workers run,
under FORCE row-level security like the run tables of 0009 (the owner keeps its maintenance policy)."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

from runs.migrations import _rls

TABLES = ("external_workflows",)


def _owner_policies(apps: Any, schema_editor: Any) -> None:
    _rls.owner_policies_create(schema_editor, TABLES)


def _drop_owner_policies(apps: Any, schema_editor: Any) -> None:
    _rls.owner_policies_drop(schema_editor, TABLES)


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0002_api_keys'),
        ('runs', '0016_event_rewrites_and_checked_summaries'),
    ]

    operations = [
        migrations.CreateModel(
            name='ExternalWorkflow',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('name', models.CharField(max_length=200)),
                ('version', models.CharField(max_length=50)),
                ('steps', models.JSONField()),
                ('tools', models.JSONField(default=list)),
                ('input_schema', models.JSONField(blank=True, null=True)),
                ('approval_guarded_steps', models.JSONField(default=list)),
                ('description', models.TextField(blank=True, default='')),
                ('created_by', models.CharField(max_length=200)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('tenant', models.ForeignKey(db_column='tenant_id', on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
            ],
            options={
                'db_table': 'external_workflows',
                'constraints': [models.UniqueConstraint(fields=('tenant', 'name', 'version'), name='external_workflows_name_version')],
            },
        ),
        *(_rls.policy(table) for table in TABLES),
        migrations.RunPython(_owner_policies, _drop_owner_policies),
    ]
