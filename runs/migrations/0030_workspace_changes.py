"""Each workspace snapshot keeps what every step since the previous one changed, so the files at a seq
between two snapshots (a fork's, a rewind's) are the earlier snapshot plus the later one's steps up to
that seq, not the earlier snapshot alone."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0029_langgraph_put_without_event'),
    ]

    operations = [
        migrations.AddField(
            model_name='workspacesnapshot',
            name='changes',
            field=models.JSONField(default=list),
        ),
    ]
