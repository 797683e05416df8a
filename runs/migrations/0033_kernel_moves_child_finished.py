"""A child run that finishes tells its parent in the kernel's own statement (runs/kernel/_sql/template.py)
instead of a trigger, and the kernel's PL/pgSQL is installed from its current sources."""

from importlib import import_module

from django.db import migrations

from runs.kernel.functions import functions_install

DROP = """
DROP TRIGGER IF EXISTS agent_runs_child_finished ON agent_runs;
DROP FUNCTION IF EXISTS keeper_child_finished();
"""


def _install(apps, schema_editor):
    functions_install(using=schema_editor.connection.alias)


class Migration(migrations.Migration):
    dependencies = [("runs", "0032_summaries_held_for_review")]

    operations = [
        migrations.RunSQL(DROP, import_module("runs.migrations.0020_child_runs").TRIGGER),
        migrations.RunPython(_install, migrations.RunPython.noop),
    ]
