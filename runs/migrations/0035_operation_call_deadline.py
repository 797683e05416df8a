from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("runs", "0034_code_back_claim")]

    operations = [
        migrations.AddField(
            model_name="tooloperation",
            name="call_deadline_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
