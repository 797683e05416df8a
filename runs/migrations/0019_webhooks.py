"""Webhooks (runs/webhooks/): subscriptions and the outbox of deliveries, under FORCE row-level
security like the run tables of 0009 (the owner keeps its maintenance policy)."""

from __future__ import annotations

from typing import Any

import django.contrib.postgres.fields
import django.db.models.deletion
import uuid
from django.db import migrations, models

from runs.migrations import _rls

TABLES = ("webhook_subscriptions", "webhook_deliveries")


def _owner_policies(apps: Any, schema_editor: Any) -> None:
    _rls.owner_policies_create(schema_editor, TABLES)


def _drop_owner_policies(apps: Any, schema_editor: Any) -> None:
    _rls.owner_policies_drop(schema_editor, TABLES)


class Migration(migrations.Migration):

    dependencies = [
        ('core', '0002_api_keys'),
        ('runs', '0018_external_workflows'),
    ]

    operations = [
        migrations.CreateModel(
            name='WebhookSubscription',
            fields=[
                ('id', models.UUIDField(default=uuid.uuid4, primary_key=True, serialize=False)),
                ('url', models.TextField()),
                ('event_types', django.contrib.postgres.fields.ArrayField(base_field=models.TextField(), size=None)),
                ('secret', models.TextField()),
                ('created_by', models.CharField(max_length=200)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('deleted_at', models.DateTimeField(blank=True, null=True)),
                ('tenant', models.ForeignKey(db_column='tenant_id', on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
            ],
            options={
                'db_table': 'webhook_subscriptions',
            },
        ),
        migrations.CreateModel(
            name='WebhookDelivery',
            fields=[
                ('id', models.BigAutoField(primary_key=True, serialize=False)),
                ('event_id', models.UUIDField()),
                ('event_type', models.TextField()),
                ('run_id', models.UUIDField(blank=True, null=True)),
                ('data', models.JSONField(default=dict)),
                ('status', models.TextField(choices=[('pending', 'Pending'), ('delivered', 'Delivered'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='pending')),
                ('attempts', models.IntegerField(default=0)),
                ('next_attempt_at', models.DateTimeField()),
                ('last_status_code', models.IntegerField(blank=True, null=True)),
                ('last_error', models.TextField(blank=True, default='')),
                ('history', models.JSONField(default=list)),
                ('created_at', models.DateTimeField()),
                ('delivered_at', models.DateTimeField(blank=True, null=True)),
                ('tenant', models.ForeignKey(db_column='tenant_id', on_delete=django.db.models.deletion.PROTECT, to='core.tenant')),
                ('subscription', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='deliveries', to='runs.webhooksubscription')),
            ],
            options={
                'db_table': 'webhook_deliveries',
            },
        ),
        migrations.AddIndex(
            model_name='webhooksubscription',
            index=models.Index(condition=models.Q(('deleted_at__isnull', True)), fields=['tenant'], name='webhook_subs_active'),
        ),
        migrations.AddIndex(
            model_name='webhookdelivery',
            index=models.Index(condition=models.Q(('status', 'pending')), fields=['next_attempt_at'], name='webhook_deliveries_due'),
        ),
        migrations.AddIndex(
            model_name='webhookdelivery',
            index=models.Index(fields=['tenant', '-created_at'], name='webhook_deliveries_recent'),
        ),
        migrations.AddConstraint(
            model_name='webhookdelivery',
            constraint=models.UniqueConstraint(fields=('subscription', 'event_id'), name='webhook_deliveries_once'),
        ),
        *(_rls.policy(table) for table in TABLES),
        migrations.RunPython(_owner_policies, _drop_owner_policies),
    ]
