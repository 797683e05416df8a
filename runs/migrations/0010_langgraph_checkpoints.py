"""LangGraph's checkpoints, channel values and pending writes of a thread (a Keeper run), under FORCE
row-level security like the run tables of 0009 (same policy; the owner keeps its maintenance policy)."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

from runs.migrations import _rls


TABLES = ("langgraph_checkpoints", "langgraph_blobs", "langgraph_writes")


def _owner_policies(apps: Any, schema_editor: Any) -> None:
    _rls.owner_policies_create(schema_editor, TABLES)


def _drop_owner_policies(apps: Any, schema_editor: Any) -> None:
    _rls.owner_policies_drop(schema_editor, TABLES)


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0009_run_row_level_security'),
    ]

    operations = [
        migrations.CreateModel(
            name='LangGraphBlob',
            fields=[
                ('pk', models.CompositePrimaryKey('tenant_id', 'thread_id', 'checkpoint_ns', 'channel', 'version', blank=True, editable=False, primary_key=True, serialize=False)),
                ('tenant_id', models.UUIDField()),
                ('thread_id', models.TextField()),
                ('checkpoint_ns', models.TextField(default='')),
                ('channel', models.TextField()),
                ('version', models.TextField()),
                ('type', models.TextField()),
                ('blob', models.BinaryField(null=True)),
                ('run', models.ForeignKey(db_column='run_id', db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='runs.agentrun')),
            ],
            options={
                'db_table': 'langgraph_blobs',
            },
        ),
        migrations.CreateModel(
            name='LangGraphWrite',
            fields=[
                ('pk', models.CompositePrimaryKey('tenant_id', 'thread_id', 'checkpoint_ns', 'checkpoint_id', 'task_id', 'idx', blank=True, editable=False, primary_key=True, serialize=False)),
                ('tenant_id', models.UUIDField()),
                ('thread_id', models.TextField()),
                ('checkpoint_ns', models.TextField(default='')),
                ('checkpoint_id', models.TextField()),
                ('task_id', models.TextField()),
                ('task_path', models.TextField(default='')),
                ('idx', models.IntegerField()),
                ('channel', models.TextField()),
                ('type', models.TextField()),
                ('blob', models.BinaryField(null=True)),
                ('run', models.ForeignKey(db_column='run_id', db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='runs.agentrun')),
            ],
            options={
                'db_table': 'langgraph_writes',
            },
        ),
        migrations.CreateModel(
            name='LangGraphCheckpoint',
            fields=[
                ('pk', models.CompositePrimaryKey('tenant_id', 'thread_id', 'checkpoint_ns', 'checkpoint_id', blank=True, editable=False, primary_key=True, serialize=False)),
                ('tenant_id', models.UUIDField()),
                ('thread_id', models.TextField()),
                ('checkpoint_ns', models.TextField(default='')),
                ('checkpoint_id', models.TextField()),
                ('parent_checkpoint_id', models.TextField(blank=True, null=True)),
                ('checkpoint', models.JSONField()),
                ('metadata', models.JSONField()),
                ('seq', models.BigIntegerField()),
                ('run', models.ForeignKey(db_column='run_id', db_constraint=False, db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='runs.agentrun')),
            ],
            options={
                'db_table': 'langgraph_checkpoints',
                'indexes': [models.Index(fields=['run'], name='langgraph_checkpoints_run_idx')],
            },
        ),
        *(_rls.policy(table) for table in TABLES),
        migrations.RunPython(_owner_policies, _drop_owner_policies),
    ]
