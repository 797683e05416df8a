"""Procedural memory: procedures learned from runs and the runs' turns they came from, under
row-level security like memory_items."""

import django.db.models.deletion
import uuid
from django.db import migrations, models

from memory.migrations._rls import policy


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0003_tenant_offboardings'),
        ('memory', '0013_erasure_request_to_erasure_app'),
    ]

    operations = [
        migrations.CreateModel(
            name='Procedure',
            fields=[
                ('procedure_id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('workflow_name', models.TextField()),
                ('shape_digest', models.CharField(max_length=100)),
                ('name', models.TextField()),
                ('trigger', models.JSONField(default=list)),
                ('steps', models.JSONField(default=list)),
                ('status', models.CharField(choices=[('proposed', 'proposed'), ('confirmed', 'confirmed'), ('rejected', 'rejected')], default='proposed', max_length=9)),
                ('version', models.PositiveIntegerField(default=1)),
                ('decided_by', models.TextField(blank=True, default='')),
                ('decided_at', models.DateTimeField(blank=True, null=True)),
                ('decision_note', models.TextField(blank=True, default='')),
                ('invalidated_at', models.DateTimeField(blank=True, null=True)),
                ('invalidation_reason', models.TextField(blank=True, default='')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('tenant', models.ForeignKey(db_column='tenant_id', on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
            ],
            options={
                'db_table': 'memory_procedures',
                'ordering': ['-updated_at'],
                'indexes': [models.Index(fields=['tenant', 'workflow_name', 'status'], name='memory_procedure_use_idx')],
                'constraints': [
                    models.UniqueConstraint(fields=('tenant', 'workflow_name', 'shape_digest'), name='memory_procedure_one_per_shape'),
                    models.CheckConstraint(condition=models.Q(('status__in', ['proposed', 'confirmed', 'rejected'])), name='memory_procedure_status'),
                ],
            },
        ),
        migrations.CreateModel(
            name='ProcedureSource',
            fields=[
                ('source_id', models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False)),
                ('run_id', models.UUIDField()),
                ('request_seq', models.IntegerField()),
                ('reply_seq', models.IntegerField()),
                ('subject_id', models.TextField(blank=True, default='')),
                ('invalidated_at', models.DateTimeField(blank=True, null=True)),
                ('invalidation_reason', models.TextField(blank=True, default='')),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('procedure', models.ForeignKey(db_column='procedure_id', on_delete=django.db.models.deletion.CASCADE, related_name='sources', to='memory.procedure')),
                ('tenant', models.ForeignKey(db_column='tenant_id', on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
            ],
            options={
                'db_table': 'memory_procedure_sources',
                'ordering': ['created_at'],
                'indexes': [models.Index(fields=['tenant', 'subject_id'], name='memory_procsrc_subject_idx'), models.Index(fields=['tenant', 'run_id'], name='memory_procsrc_run_idx')],
                'constraints': [models.UniqueConstraint(fields=('procedure', 'run_id', 'request_seq'), name='memory_procedure_source_once')],
            },
        ),
        policy("memory_procedures"),
        policy("memory_procedure_sources"),
    ]
