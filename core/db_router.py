"""Migrations run as the table owner; everything else uses the application role (default)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

OWNER_ALIAS = "owner"


def migration_alias() -> str:
    return OWNER_ALIAS if OWNER_ALIAS in settings.DATABASES else "default"


class OwnerMigratesRouter:
    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "default"

    def db_for_write(self, model: Any, **hints: Any) -> str:
        return "default"

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        # Both aliases reach the same tables: Django asks this to know which models a connection
        # holds (flush, introspection). Which role runs migrations is decided by our `migrate`.
        return db in ("default", OWNER_ALIAS)
