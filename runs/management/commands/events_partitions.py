"""python manage.py events_partitions [--ahead MONTHS] [--retention-days DAYS] [--dry-run] [--json]:
agent_events' monthly partitions made ahead, then those whose runs all ended before the retention
cutoff dropped; each step is printed as it happens, then the partitions left."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from runs.operator.arguments import DAYS
from runs.operator.partitions import events_partitions, events_partitions_make, events_retention


class Command(BaseCommand):
    help = (
        "Make agent_events' monthly partitions ahead of time and drop the months whose runs all ended "
        "before the retention cutoff (KEEPER_EVENTS_RETENTION_DAYS unless --retention-days; 0 keeps all)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--ahead", type=int, default=None, metavar="MONTHS", help="months made ahead of now"
        )
        parser.add_argument("--retention-days", type=DAYS, default=None, metavar="DAYS")
        parser.add_argument(
            "--dry-run", action="store_true", help="make nothing, drop nothing: say what would go"
        )
        parser.add_argument("--json", action="store_true")

    def handle(
        self, *args: Any, ahead: int | None, retention_days: float | None, dry_run: bool, json: bool, **_: Any
    ) -> None:
        progress = (self.stderr if json else self.stdout).write
        try:
            made = events_partitions_make(months_ahead=ahead, progress=progress) if not dry_run else None
            report = events_retention(retention_days=retention_days, dry_run=dry_run, progress=progress)
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        if made is not None:
            report.made, report.moved_from_default = made.made, made.moved_from_default
        partitions = events_partitions()
        if json:
            self.stdout.write(_dumps({**report.as_json(), "partitions": [p.as_json() for p in partitions]}))
            return
        for partition in partitions:
            span = f"{partition.range_from:%Y-%m}" if partition.range_from else "default"
            self.stdout.write(f"{partition.name:>24}  {span:>8}  ~{partition.approx_rows} events")
        verb = "would be dropped" if dry_run else "dropped"
        self.stdout.write(f"{len(report.made)} made, {len(report.dropped)} {verb}, {len(report.kept)} kept")


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)
