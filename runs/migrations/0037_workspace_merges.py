"""Workspace merges (runs/engine/merges.py): one row per merge of a branch into another run of its
tree, under FORCE row-level security like the run tables."""

import django.db.models.deletion
from django.db import migrations, models

from runs.migrations import _rls


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0005_api_keys_row_level_security'),
        ('runs', '0036_admin_plural_names'),
    ]

    operations = [
        migrations.CreateModel(
            name='WorkspaceMerge',
            fields=[
                ('merge_id', models.UUIDField(primary_key=True, serialize=False)),
                ('base_run_id', models.UUIDField()),
                ('base_seq', models.BigIntegerField()),
                ('source_seq', models.BigIntegerField(null=True)),
                ('target_seq', models.BigIntegerField(null=True)),
                ('target_revision', models.BigIntegerField()),
                ('status', models.TextField(choices=[('conflicts', 'conflicts open'), ('applied', 'applied'), ('abandoned', 'abandoned')])),
                ('conflicts', models.JSONField(default=list)),
                ('manifest', models.JSONField(default=dict)),
                ('sides', models.JSONField(default=dict)),
                ('taken', models.JSONField(default=dict)),
                ('state_taken', models.JSONField(default=dict)),
                ('result_seq', models.BigIntegerField(null=True)),
                ('actor', models.TextField()),
                ('resolved_by', models.TextField(default='')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('applied_at', models.DateTimeField(null=True)),
                ('source', models.ForeignKey(db_column='source_run_id', on_delete=django.db.models.deletion.CASCADE, related_name='merges_out', to='runs.agentrun')),
                ('target', models.ForeignKey(db_column='target_run_id', on_delete=django.db.models.deletion.CASCADE, related_name='merges_in', to='runs.agentrun')),
                ('tenant', models.ForeignKey(db_column='tenant_id', on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
            ],
            options={
                'db_table': 'workspace_merges',
                'indexes': [models.Index(fields=['target', 'status'], name='workspace_merges_target')],
                'constraints': [models.UniqueConstraint(condition=models.Q(('status', 'conflicts')), fields=('target',), name='workspace_merges_one_open')],
            },
        ),
        _rls.policy('workspace_merges'),
    ]
