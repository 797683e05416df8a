"""python manage.py keeper_setup: the demo tenant and a first administrator (idempotent)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand

from core.services import keeper_setup


class Command(BaseCommand):
    help = "Create the demo tenant and, if there is no superuser yet, an 'admin' superuser."

    def handle(self, *args: Any, **options: Any) -> None:
        result = keeper_setup(data_dir=settings.DATA_DIR)
        if result.admin_created:
            where = result.admin_password_file or "KEEPER_ADMIN_PASSWORD"
            self.stdout.write(f"keeper: created superuser 'admin'; its password is in {where}")
        elif result.admin_password_file:
            self.stdout.write(f"keeper: sign in as 'admin' with the password in {result.admin_password_file}")
