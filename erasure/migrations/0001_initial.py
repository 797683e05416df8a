"""The erasure request moves from the memory app to the erasure app: the same table (erasure_requests,
with its row-level security from memory 0004), now the erasure app's model. Nothing changes in the
database but the content type's app label."""

import uuid

import django.db.models.deletion
from django.db import migrations, models


def content_type_to_erasure(apps, schema_editor):
    # On the connection that migrates (the owner's): the router sends other queries to the app role.
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(schema_editor.connection.alias)
    if not content_types.filter(app_label="erasure", model="erasurerequest").exists():
        content_types.filter(app_label="memory", model="erasurerequest").update(app_label="erasure")


def content_type_to_memory(apps, schema_editor):
    content_types = apps.get_model("contenttypes", "ContentType").objects.using(schema_editor.connection.alias)
    content_types.filter(app_label="erasure", model="erasurerequest").update(app_label="memory")


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("core", "0001_initial"),
        ("memory", "0011_cjk_words"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ErasureRequest",
                    fields=[
                        (
                            "request_id",
                            models.UUIDField(default=uuid.uuid4, editable=False, primary_key=True, serialize=False),
                        ),
                        ("subject_id", models.TextField()),
                        ("subject_digest", models.TextField()),
                        ("requested_by", models.TextField()),
                        (
                            "status",
                            models.TextField(
                                choices=[
                                    ("pending", "Pending"),
                                    ("running", "Running"),
                                    ("completed", "Completed"),
                                    ("failed", "Failed"),
                                ],
                                default="pending",
                            ),
                        ),
                        ("progress", models.JSONField(default=dict)),
                        ("receipt", models.JSONField(blank=True, null=True)),
                        ("error", models.TextField(blank=True, default="")),
                        ("searched", models.JSONField(blank=True, default=list)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("completed_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "tenant",
                            models.ForeignKey(
                                db_column="tenant_id",
                                on_delete=django.db.models.deletion.PROTECT,
                                to="core.tenant",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "erasure_requests",
                        "ordering": ["-created_at"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("status__in", ["pending", "running", "completed", "failed"])),
                                name="erasure_requests_status_valid",
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_to_erasure, content_type_to_memory),
    ]
