"""python manage.py redispatch (--run ID ... | --stuck) [--tenant SLUG] [--dry-run] [--json]"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from core.tenancy import tenant_get
from runs.operator.redispatch import runs_for_redispatch, runs_wake
from runs.operator.stuck import STUCK_AFTER_SECONDS, runs_stuck


class Command(BaseCommand):
    help = "Send wake-ups to the given runs, or to every stuck one. Changes no state: the database decides."

    def add_arguments(self, parser: Any) -> None:
        target = parser.add_mutually_exclusive_group(required=True)
        target.add_argument("--run", nargs="+", dest="run_ids", metavar="ID", help="run ids")
        target.add_argument("--stuck", action="store_true", help="every stuck run a wake-up can move")
        parser.add_argument(
            "--older-than",
            type=float,
            default=STUCK_AFTER_SECONDS,
            help="with --stuck: seconds without progress (as stuck_runs)",
        )
        parser.add_argument("--tenant", default=None)
        parser.add_argument("--dry-run", action="store_true", help="only list the runs")
        parser.add_argument("--json", action="store_true")

    def handle(
        self,
        *args: Any,
        run_ids: list[str] | None,
        stuck: bool,
        older_than: float,
        tenant: str | None,
        dry_run: bool,
        json: bool,
        **options: Any,
    ) -> None:
        try:
            tenant_id = tenant_get(slug_or_id=tenant).tenant_id if tenant else None
            if stuck:
                ids = [
                    s.run_id for s in runs_stuck(older_than=older_than, tenant_id=tenant_id) if s.dispatchable
                ]
            else:
                ids = runs_for_redispatch(run_ids=run_ids or [], tenant_id=tenant_id)
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        result = runs_wake(run_ids=ids, dry_run=dry_run)
        if json:
            self.stdout.write(
                _dumps(
                    {
                        "run_ids": [str(r) for r in result.run_ids],
                        "sent": result.sent,
                        "dry_run": result.dry_run,
                    }
                )
            )
            return
        for run_id in result.run_ids:
            self.stdout.write(str(run_id))
        if dry_run:
            self.stdout.write(f"{len(result.run_ids)} run(s) would get a wake-up (dry run: nothing sent)")
        else:
            failed = len(result.run_ids) - result.sent
            self.stdout.write(
                f"{result.sent} wake-up(s) sent" + (f", {failed} not sent (broker away)" if failed else "")
            )


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)
