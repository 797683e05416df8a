"""keeper_code_back_claim: the sweep finds runs suspended for want of their code, across tenants."""

from django.db import migrations

from runs.kernel.functions import functions_install
from runs.migrations import _rls


def _install(apps, schema_editor):
    functions_install(using=schema_editor.connection.alias)
    _rls.execute_grant(schema_editor, ["keeper_code_back_claim(integer)"])


class Migration(migrations.Migration):
    dependencies = [("runs", "0033_kernel_moves_child_finished")]

    operations = [
        migrations.RunPython(_install, migrations.RunPython.noop),
    ]
