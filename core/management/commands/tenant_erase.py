"""python manage.py tenant_erase <slug> --confirm <slug>: erase a whole tenant and print the receipt."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from core.errors import ApplicationError
from core.offboarding import tenant_erase


class Command(BaseCommand):
    help = (
        "Erase every row, per-tenant index, Redis window and API key of a tenant; resumable and "
        "idempotent. Refused while a run of the tenant holds a live lease."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("slug", help="the tenant's slug")
        parser.add_argument("--confirm", required=True, help="the slug again, to confirm")
        parser.add_argument("--by", default="operator:manage.py", help="who asks (kept in the receipt)")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            done = tenant_erase(
                slug=options["slug"],
                confirm=options["confirm"],
                requested_by=options["by"],
                progress=self.stderr.write,
            )
        except ApplicationError as error:
            raise CommandError(error.message) from None
        self.stdout.write(json.dumps(done.receipt, indent=2, sort_keys=True))
        if not done.receipt.get("clean"):
            raise CommandError(f"the tenant is not clean: {done.error}")
