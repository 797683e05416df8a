"""The admin names these models in the plural as English does (Django adds an "s": "Summarys")."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0035_operation_call_deadline'),
    ]

    operations = [
        migrations.AlterModelOptions(
            name='summary',
            options={'ordering': ['run_id', 'covers_from_seq'], 'verbose_name_plural': 'summaries'},
        ),
        migrations.AlterModelOptions(
            name='webhookdelivery',
            options={'verbose_name_plural': 'webhook deliveries'},
        ),
    ]
