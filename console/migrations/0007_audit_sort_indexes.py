from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0006_memberships_row_level_security"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="auditentry",
            index=models.Index(fields=["actor", "id"], name="console_audit_actor"),
        ),
        migrations.AddIndex(
            model_name="auditentry",
            index=models.Index(fields=["action", "id"], name="console_audit_action"),
        ),
    ]
