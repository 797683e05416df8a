"""python manage.py stuck_runs [--tenant SLUG] [--older-than SECONDS] [--json]: runs that should move and do not."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from core.tenancy import tenant_get
from runs.operator.arguments import SECONDS
from runs.operator.stuck import STUCK_AFTER_SECONDS, runs_stuck


class Command(BaseCommand):
    help = (
        "List runs that should be moving but are not (lost wake-ups, expired leases, unverified resume "
        "requests, operations in doubt). A report: exits 0; 2 on bad arguments."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--tenant", default=None, help="only this tenant (slug or id)")
        parser.add_argument(
            "--older-than",
            type=SECONDS,
            default=STUCK_AFTER_SECONDS,
            help=f"seconds without progress before a run counts (default {STUCK_AFTER_SECONDS:g})",
        )
        parser.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def handle(self, *args: Any, tenant: str | None, older_than: float, json: bool, **options: Any) -> None:
        try:
            tenant_id = tenant_get(slug_or_id=tenant).tenant_id if tenant else None
            stuck = runs_stuck(older_than=older_than, tenant_id=tenant_id)
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}", returncode=2) from None
        if json:
            self.stdout.write(_dumps([s.as_json() for s in stuck]))
            return
        if not stuck:
            self.stdout.write(f"no stuck runs (older than {older_than:g}s)")
            return
        header = ("RUN", "TENANT", "WORKFLOW", "STATUS", "NEXT STEP", "LEASE", "AGE", "WHY")
        rows = [
            (
                str(s.run_id),
                s.tenant,
                s.workflow,
                s.status,
                s.next_step or "-",
                f"{s.lease_owner} until {s.lease_expires_at:%Y-%m-%d %H:%M:%S}"
                if s.lease_owner and s.lease_expires_at
                else "-",
                f"{int(s.age_seconds)}s",
                "; ".join(s.reasons),
            )
            for s in stuck
        ]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header) - 1)]
        for row in [header, *rows]:
            self.stdout.write(
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
            )
        self.stdout.write(f"{len(stuck)} stuck run(s)")


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)
