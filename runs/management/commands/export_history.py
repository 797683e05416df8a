"""python manage.py export_history RUN_ID: the run's events as JSON (for replay fixtures and debugging)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from runs.replay import history_export
from runs.selectors import run_get


class Command(BaseCommand):
    help = "Print a run's event history as JSON: workflow, version and every event with its state."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run_id")

    def handle(self, *args: Any, run_id: str, **options: Any) -> None:
        try:
            run = run_get(run_id=uuid.UUID(run_id))
        except (ApplicationError, ValueError) as exc:
            raise CommandError(f"no run {run_id!r}: {exc}") from None
        document = {"workflow": run.workflow_name, "workflow_version": run.workflow_version,
                    "status": run.status, "events": history_export(run_id=run.run_id)}  # fmt: skip
        self.stdout.write(json.dumps(document, indent=1, sort_keys=True, default=str))
