"""Schedules (runs/engine/schedules.py): a tenant's workflow started on a cron expression or an interval,
under FORCE row-level security like the run tables of 0009 (the owner keeps its maintenance policy)."""

from __future__ import annotations

import uuid
from typing import Any

import django.db.models.deletion
from django.db import migrations, models

from runs.migrations import _rls

TABLES = ("workflow_schedules",)


def _owner_policies(apps: Any, schema_editor: Any) -> None:
    _rls.owner_policies_create(schema_editor, TABLES)


def _drop_owner_policies(apps: Any, schema_editor: Any) -> None:
    _rls.owner_policies_drop(schema_editor, TABLES)


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0002_api_keys'),
        ('runs', '0023_workspace_snapshots'),
    ]

    operations = [
        migrations.CreateModel(
            name='WorkflowSchedule',
            fields=[
                ('schedule_id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('workflow_name', models.TextField()),
                ('cron', models.TextField(blank=True, default='')),
                ('interval_seconds', models.IntegerField(blank=True, null=True)),
                ('input', models.JSONField(default=dict)),
                ('subject', models.TextField(blank=True, default='')),
                ('overlap', models.TextField(choices=[('skip', 'Skip'), ('queue', 'Queue')], default='skip')),
                ('enabled', models.BooleanField(default=True)),
                ('next_fire_at', models.DateTimeField()),
                ('last_slot', models.DateTimeField(blank=True, null=True)),
                ('last_run_id', models.UUIDField(blank=True, null=True)),
                ('last_skipped_slot', models.DateTimeField(blank=True, null=True)),
                ('last_error', models.TextField(blank=True, default='')),
                ('fired_count', models.IntegerField(default=0)),
                ('skipped_count', models.IntegerField(default=0)),
                ('created_by', models.TextField()),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('tenant', models.ForeignKey(db_column='tenant_id', on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
            ],
            options={
                'db_table': 'workflow_schedules',
                'indexes': [models.Index(condition=models.Q(('enabled', True)), fields=['next_fire_at'], name='workflow_schedules_due')],
                'constraints': [models.CheckConstraint(condition=models.Q(models.Q(('cron', ''), ('interval_seconds__gt', 0)), models.Q(models.Q(('cron', ''), _negated=True), ('interval_seconds__isnull', True)), _connector='OR'), name='workflow_schedules_cron_or_interval')],
            },
        ),
        *(_rls.policy(table) for table in TABLES),
        migrations.RunPython(_owner_policies, _drop_owner_policies),
    ]
