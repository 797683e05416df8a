"""python manage.py keeper_demo: load the demo content once (development only; `make run` calls it)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from console.demo import MARKER, demo_load


class Command(BaseCommand):
    help = "Load demo tenants, users for each role, runs in every state, memory, documents and an erasure (once)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--force-production", action="store_true", help="load even with DEBUG off (never do this)"
        )

    def handle(self, *args: Any, force_production: bool, **options: Any) -> None:
        if (settings.DATA_DIR / MARKER).exists():  # said first: DEBUG off or on, nothing is to be done
            self._already()
            return
        if not settings.DEBUG and not force_production:
            raise CommandError(
                "the demo creates users with printed passwords: development only (DEBUG is off)"
            )
        try:
            result = demo_load(data_dir=settings.DATA_DIR)
        except OSError as exc:  # the sandbox is served by the web process: it must be up
            raise CommandError(
                f"could not reach the payments sandbox at {settings.KEEPER_SANDBOX_URL}: {exc}"
            ) from None
        if not result.loaded:
            self._already()
            return
        self.stdout.write("keeper: demo loaded: tenants acme and globex; runs " + ", ".join(result.runs))
        self.stdout.write("keeper: demo sign-ins (development only, also in demo-credentials.txt):")
        for username, password in result.credentials.items():
            self.stdout.write(f"keeper:   {username:<18} {password}")

    def _already(self) -> None:
        self.stdout.write(
            f"keeper: demo already loaded (see {settings.DATA_DIR / MARKER}); "
            f"sign-ins are in {settings.DATA_DIR / 'demo-credentials.txt'}"
        )
