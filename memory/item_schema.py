"""Memory item schemas: each namespace's values have a version, and a registry of pure value
migrations (n -> n + 1) brings an old item's value to the current version, like run state's.

Reads migrate on the fly (memory_recall); memory_items_migrate rewrites stored items (each becomes a
new item that supersedes the old one, its provenance and consent basis kept). An item whose version
is newer than this code knows is not read at all (never misread as an older shape).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from core.errors import ApplicationError

ValueMigration = Callable[[Any], Any]
_MIGRATIONS: dict[str, dict[int, ValueMigration]] = {}


class UnsupportedItemSchema(ApplicationError):
    code = "unsupported_memory_schema"
    http_status = 409


def item_migration_register(*, namespace: str, from_version: int, migrate: ValueMigration) -> None:
    """Register the value migration of `namespace` from from_version to from_version + 1."""
    steps = _MIGRATIONS.setdefault(namespace, {})
    if from_version < 1 or (from_version > 1 and from_version - 1 not in steps):
        raise ValueError(f"{namespace}: a migration from {from_version} needs the ones before it")
    if from_version in steps and steps[from_version] is not migrate:
        raise ValueError(f"{namespace}: a migration from version {from_version} is already registered")
    steps[from_version] = migrate


def item_migration_unregister(*, namespace: str) -> None:
    """Forget a namespace's migrations (tests that register their own)."""
    _MIGRATIONS.pop(namespace, None)


def item_schema_current(namespace: str) -> int:
    """The version a new value of `namespace` is written in: 1 + the migrations registered."""
    return 1 + len(_MIGRATIONS.get(namespace, {}))


def item_value_migrate(*, namespace: str, value: Any, version: int) -> Any:
    """The value brought from `version` to the namespace's current one (a copy; pure)."""
    current = item_schema_current(namespace)
    if version > current or version < 1:
        raise UnsupportedItemSchema(
            f"{namespace} items of schema version {version} are unknown to this code (current {current})",
            details={"namespace": namespace, "version": version, "current": current},
        )
    data = copy.deepcopy(value)
    for step in range(version, current):
        data = _MIGRATIONS[namespace][step](data)
    return data
