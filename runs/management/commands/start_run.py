"""python manage.py start_run WORKFLOW --input JSON [--tenant SLUG] [--idempotency-key KEY]"""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from core.tenancy import tenant_get
from runs.engine.runs import client_idempotency_key, run_start


class Command(BaseCommand):
    help = "Start a run of a registered workflow and print its id."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("workflow")
        parser.add_argument("--input", default="{}", help="the run's input, a JSON object")
        parser.add_argument(
            "--tenant",
            default="demo",
            help="the tenant's slug or id (default: demo, the set-up tenant; the demo's users work in acme)",
        )
        parser.add_argument("--idempotency-key", default=None)

    def handle(
        self, *args: Any, workflow: str, input: str, tenant: str, idempotency_key: str | None, **options: Any
    ) -> None:
        try:
            data = json.loads(input)
        except json.JSONDecodeError as exc:
            raise CommandError(f"--input is not JSON: {exc}") from None
        try:
            started = run_start(
                tenant=tenant_get(slug_or_id=tenant),
                workflow_name=workflow,
                input=data,
                actor="cli",
                idempotency_key=client_idempotency_key(idempotency_key),
            )
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        verb = "started" if started.created else "already started"
        self.stdout.write(
            f"{started.run.run_id} {verb} ({started.run.workflow_name} v{started.run.workflow_version})"
            f" in tenant {started.run.tenant.slug}"
        )
