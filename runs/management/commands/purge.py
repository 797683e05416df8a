"""python manage.py purge [--older-than DAYS] [--status ...] [--tenant SLUG] [--snapshots-older-than DAYS]
[--dry-run] [--yes] [--json]: the retention policy for finished runs and old retrieval snapshots."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from core.tenancy import tenant_get
from runs.operator.arguments import DAYS
from runs.operator.retention import purge_statuses, runs_purge

DEFAULT_OLDER_THAN_DAYS = 90.0
_TABLES = ("runs", "events", "operations", "approvals", "summaries", "snapshots", "forks_expired")


class Command(BaseCommand):
    help = (
        "Delete finished runs (and their events, operations, approvals, summaries) older than the policy, "
        "old retrieval snapshots, and expire orphan forks. Never a running or suspended run."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--older-than",
            type=DAYS,
            default=DEFAULT_OLDER_THAN_DAYS,
            metavar="DAYS",
            help=f"finished more than DAYS ago (default {DEFAULT_OLDER_THAN_DAYS:g})",
        )
        parser.add_argument(
            "--status", default="completed,failed,cancelled", help="comma-separated finished statuses"
        )
        parser.add_argument("--tenant", default=None)
        parser.add_argument(
            "--snapshots-older-than",
            type=DAYS,
            default=None,
            metavar="DAYS",
            help="also delete retrieval snapshots older than DAYS",
        )
        parser.add_argument("--batch-size", type=int, default=1000)
        parser.add_argument("--dry-run", action="store_true", help="only count")
        parser.add_argument("--yes", action="store_true", help="do not ask (required without a terminal)")
        parser.add_argument("--json", action="store_true")

    def handle(
        self,
        *args: Any,
        older_than: float,
        status: str,
        tenant: str | None,
        snapshots_older_than: float | None,
        batch_size: int,
        dry_run: bool,
        yes: bool,
        json: bool,
        **options: Any,
    ) -> None:
        if batch_size < 1:
            raise CommandError("--batch-size must be at least 1")
        try:
            statuses = purge_statuses(status)
            tenant_id = tenant_get(slug_or_id=tenant).tenant_id if tenant else None
            kwargs = {
                "older_than_days": older_than,
                "statuses": statuses,
                "tenant_id": tenant_id,
                "snapshots_older_than_days": snapshots_older_than,
                "batch_size": batch_size,
            }
            if not dry_run and not yes:
                self._confirm(runs_purge(**kwargs, dry_run=True))
            report = runs_purge(**kwargs, dry_run=dry_run, progress=self._progress(json))
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        if json:
            self.stdout.write(_dumps(report.as_json()))
            return
        verb = "would be deleted (dry run)" if dry_run else "deleted"
        for table in _TABLES:
            self.stdout.write(f"{table:>14}: {getattr(report, table)}")
        if not dry_run:
            self.stdout.write(f"{'redis windows':>14}: {report.session_windows}")
        if report.kept_open_operations:
            self.stdout.write(
                f"kept {report.kept_open_operations} finished run(s) with an operation started/unknown"
            )
        self.stdout.write(f"{report.runs} run(s) {verb}")

    def _confirm(self, preview: Any) -> None:
        if not sys.stdin.isatty():
            raise CommandError(
                "refusing to purge without --yes: no terminal to confirm on (try --dry-run first)"
            )
        answer = input(
            f"Delete {preview.runs} run(s), {preview.events} event(s), {preview.snapshots} snapshot(s)? [y/N] "
        )
        if answer.strip().lower() not in ("y", "yes"):
            raise CommandError("purge cancelled; nothing deleted")

    def _progress(self, quiet_stdout: bool) -> Any:
        stream = self.stderr if quiet_stdout else self.stdout
        return lambda line: stream.write(line)


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)
