"""The step commit's function names the run's tenant (p_tenant_id), as every move's statement now finds
its run by tenant and id. A new signature is a second function beside the old one, so the old one is
dropped before the kernel's current sources are installed."""

from django.db import migrations

from runs.kernel.functions import functions_install

OLD = (
    "keeper_commit_step(uuid, bigint, bigint, text, text, text, text, text, text, text, integer, text, text, "
    "text, text, boolean, boolean, double precision, integer, boolean, boolean, text, text, text)"
)


def _install(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"DROP FUNCTION IF EXISTS {OLD}")
    functions_install(using=schema_editor.connection.alias)


class Migration(migrations.Migration):
    dependencies = [("runs", "0041_webhook_deliveries_partitioned")]

    operations = [
        migrations.RunPython(_install, migrations.RunPython.noop),
    ]
