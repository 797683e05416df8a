"""`migrate` that runs as the owner role when one is configured (DATABASE_OWNER_URL)."""

from __future__ import annotations

from typing import Any

from django.core.management.commands.migrate import Command as DjangoMigrate

from core.db_router import migration_alias


class Command(DjangoMigrate):
    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.set_defaults(database=migration_alias())
