"""Imported history copies are a state (`imported`), not a sentinel lease owner that a transition clears."""

from django.db import migrations, models

FROM_SENTINEL = """
UPDATE agent_runs SET imported = true, lease_owner = NULL, lease_expires_at = NULL
 WHERE lease_owner LIKE 'imported:%%'
"""
TO_SENTINEL = """
UPDATE agent_runs SET lease_owner = 'imported:' || run_id::text, lease_expires_at = '9999-12-31T00:00:00Z'
 WHERE imported
"""


class Migration(migrations.Migration):
    dependencies = [("runs", "0007_resume_verified_index")]

    operations = [
        migrations.AddField(
            model_name="agentrun",
            name="imported",
            field=models.BooleanField(db_default=False, default=False),
        ),
        migrations.RunSQL(FROM_SENTINEL, TO_SENTINEL),
    ]
