"""python manage.py partitions [TABLE ...] [--ahead MONTHS] [--retention-days DAYS] [--dry-run] [--json]:
the monthly partitions of agent_events, webhook_deliveries and console_audit_log (all unless TABLEs are
named) made ahead, then the months past each table's retention that nothing still needs dropped; each
step is printed as it happens, then the partitions left."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from runs.operator.arguments import DAYS
from runs.operator.partitions import PARTITIONED, partitions_make, partitions_of, partitions_retention


class Command(BaseCommand):
    help = (
        "Make the monthly partitions of agent_events, webhook_deliveries and console_audit_log ahead of "
        "time and drop the months past each table's retention that nothing still needs "
        "(KEEPER_EVENTS_RETENTION_DAYS, KEEPER_WEBHOOK_DELIVERIES_RETENTION_DAYS, KEEPER_AUDIT_RETENTION_DAYS)."
    )
    tables: tuple[str, ...] | None = None  # a command for fixed tables (events_partitions) takes no TABLE

    def add_arguments(self, parser: Any) -> None:
        if self.tables is None:
            parser.add_argument("table", nargs="*", metavar="TABLE", help=", ".join(PARTITIONED))
        parser.add_argument(
            "--ahead", type=int, default=None, metavar="MONTHS", help="months made ahead of now"
        )
        parser.add_argument(
            "--retention-days",
            type=DAYS,
            default=None,
            metavar="DAYS",
            help="instead of the table's setting (name the table); 0 drops nothing",
        )
        parser.add_argument(
            "--dry-run", action="store_true", help="make nothing, drop nothing: say what would go"
        )
        parser.add_argument("--json", action="store_true")

    def handle(
        self,
        *args: Any,
        ahead: int | None,
        retention_days: float | None,
        dry_run: bool,
        json: bool,
        table: list[str] | None = None,
        **_: Any,
    ) -> None:
        tables = list(self.tables or table or PARTITIONED)
        if retention_days is not None and not (self.tables or table):
            # One number for every table would override the audit log's keep-forever as well.
            raise CommandError("--retention-days overrides one table's retention: name the table")
        progress = (self.stderr if json else self.stdout).write
        try:
            made = (
                partitions_make(tables=tables, months_ahead=ahead, progress=progress) if not dry_run else None
            )
            report = partitions_retention(
                tables=tables, retention_days=retention_days, dry_run=dry_run, progress=progress
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        if made is not None:
            report.made, report.moved_from_default = made.made, made.moved_from_default
        partitions = [p for name in tables for p in partitions_of(name)]
        if json:
            self.stdout.write(_dumps({**report.as_json(), "partitions": [p.as_json() for p in partitions]}))
            return
        for partition in partitions:
            span = f"{partition.range_from:%Y-%m}" if partition.range_from else "default"
            self.stdout.write(f"{partition.name:>28}  {span:>8}  ~{partition.approx_rows} rows")
        verb = "would be dropped" if dry_run else "dropped"
        self.stdout.write(f"{len(report.made)} made, {len(report.dropped)} {verb}, {len(report.kept)} kept")


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)
