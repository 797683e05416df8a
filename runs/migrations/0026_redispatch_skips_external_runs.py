"""The redispatch sweep's claim (keeper_redispatch_claim, 0009) leaves out the runs of external
workflows: outside workers claim those themselves, so waking Keeper's workers for them every sweep
only sent tasks that could do nothing (an outside tester saw one re-dispatch line every 15 s)."""

from __future__ import annotations

from importlib import import_module

from django.db import migrations

PREVIOUS = import_module("runs.migrations.0009_run_row_level_security")
OLD = PREVIOUS.FUNCTIONS.split("CREATE FUNCTION keeper_redispatch_claim", 1)[1].split("CREATE FUNCTION", 1)[0]
OLD = "CREATE OR REPLACE FUNCTION keeper_redispatch_claim" + OLD
NEW = OLD.replace(
    "         AND NOT a.imported\n",
    "         AND NOT a.imported\n"
    "         AND NOT EXISTS (SELECT 1 FROM public.external_workflows w WHERE w.tenant_id = a.tenant_id\n"
    "                           AND w.name = a.workflow_name AND w.version = a.workflow_version)\n",
    1,
)
assert NEW != OLD


class Migration(migrations.Migration):
    dependencies = [("runs", "0025_langgraph_put_leaner")]

    operations = [migrations.RunSQL(NEW, OLD)]
