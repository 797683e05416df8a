"""The admin calls the audit log "audit entries", not "audit entrys" (a model option, no SQL)."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("console", "0003_audit_notes_erasable")]

    operations = [
        migrations.AlterModelOptions(
            name="auditentry",
            options={"ordering": ["-id"], "verbose_name_plural": "audit entries"},
        ),
    ]
