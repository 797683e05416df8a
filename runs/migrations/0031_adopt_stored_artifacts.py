"""Blobs stored before Keeper kept records of them: a record for each one a tenant's rows name
(workspace manifests, tool results, run states), found under the configured KEEPER_ARTIFACT_ROOT by
its digest and kept only if its bytes match (core/artifacts/legacy.py). References keep working by
digest; a path in them is never opened. A store other than that folder gets a copy of the bytes
(or run `manage.py artifacts_adopt --root <old folder>` after moving)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.db import DatabaseError, migrations


def _adopt(apps: Any, schema_editor: Any) -> None:
    from django.conf import settings
    from django.db import connections

    from core.artifacts.legacy import artifacts_adopt_legacy

    here, app = schema_editor.connection.settings_dict, connections["default"].settings_dict
    if any(here[k] != app[k] for k in ("NAME", "HOST", "PORT")):  # e.g. a test database being made
        return
    try:
        counts = artifacts_adopt_legacy(root=Path(settings.KEEPER_ARTIFACT_ROOT))
    except DatabaseError as exc:  # a reference kind's table from a later migration: adopt after them
        print(f"\n  stored artifacts not adopted yet ({exc}); run `manage.py artifacts_adopt` after migrate")
        return
    if any(counts.values()):
        print(f"\n  stored artifacts adopted from {settings.KEEPER_ARTIFACT_ROOT}: {counts}")


class Migration(migrations.Migration):
    # The adoption reads as the application role, tenant by tenant, on its own connection.
    atomic = False

    dependencies = [
        ("core", "0004_stored_artifacts"),
        ("runs", "0030_workspace_changes"),
    ]

    operations = [migrations.RunPython(_adopt, migrations.RunPython.noop)]
