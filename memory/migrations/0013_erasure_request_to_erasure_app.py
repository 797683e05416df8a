"""The erasure request is the erasure app's model now (erasure 0001): memory's tombstones point to it
there. The table and its foreign key stay as they are; only Django's state changes."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("erasure", "0001_initial"),
        ("memory", "0012_held_claims_keep_their_consent_basis"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="tombstone",
                    name="request",
                    field=models.ForeignKey(
                        db_column="request_id",
                        on_delete=django.db.models.deletion.PROTECT,
                        to="erasure.erasurerequest",
                    ),
                ),
                migrations.DeleteModel(name="ErasureRequest"),
            ],
            database_operations=[],
        ),
    ]
