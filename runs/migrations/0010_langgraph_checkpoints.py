"""LangGraph's checkpoints, channel values and pending writes of a thread (a Keeper run), under FORCE
row-level security like the run tables of 0009 (same policy; the owner keeps its maintenance policy)."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


TENANTS = "string_to_array(NULLIF(current_setting('app.tenant_id', true), ''), ',')::uuid[]"
TABLES = ("langgraph_checkpoints", "langgraph_blobs", "langgraph_writes")


def _policy(table: str) -> migrations.RunSQL:
    return migrations.RunSQL(
        sql=f"""
            ALTER TABLE {table} ENABLE ROW LEVEL SECURITY;
            ALTER TABLE {table} FORCE ROW LEVEL SECURITY;
            CREATE POLICY tenant_isolation ON {table}
                USING (tenant_id = ANY({TENANTS})) WITH CHECK (tenant_id = ANY({TENANTS}));
        """,
        reverse_sql=f"DROP POLICY IF EXISTS tenant_isolation ON {table}; ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY;",
    )


def _owner_policies(apps: Any, schema_editor: Any) -> None:
    """As in 0009: the owner (this migration's role) keeps a maintenance policy only when the
    application role is another role."""
    quote = schema_editor.quote_name
    app = str(settings.DATABASES["default"].get("USER") or "")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        owner = cursor.fetchone()[0]
        if app and app != owner:
            for table in TABLES:
                cursor.execute(
                    f"CREATE POLICY owner_maintenance ON {table} TO {quote(owner)} USING (true) WITH CHECK (true)"
                )


def _drop_owner_policies(apps: Any, schema_editor: Any) -> None:
    with schema_editor.connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"DROP POLICY IF EXISTS owner_maintenance ON {table}")


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
        *(_policy(table) for table in TABLES),
        migrations.RunPython(_owner_policies, _drop_owner_policies),
    ]
