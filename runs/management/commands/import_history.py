"""python manage.py import_history FILE [--tenant SLUG] [--keep-ids] [--json]: load an exported run for debugging.

All or nothing (one transaction). The imported run is marked `imported`: neither the sweep nor a
worker ever takes it, and resume, cancel and messages are refused with `run_imported`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from runs.operator.history import history_import


class Command(BaseCommand):
    help = "Import a run exported by export_history (new run id unless --keep-ids), fenced from workers."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("file")
        parser.add_argument(
            "--tenant", default=None, help="tenant slug (created if needed); default: the file's"
        )
        parser.add_argument("--keep-ids", action="store_true", help="keep the run, approval and summary ids")
        parser.add_argument("--json", action="store_true")

    def handle(
        self, *args: Any, file: str, tenant: str | None, keep_ids: bool, json: bool, **options: Any
    ) -> None:
        try:
            text = Path(file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise CommandError(f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}") from None
        try:
            document = _loads(text)
        except ValueError as exc:
            raise CommandError(f"{file} is not JSON: {exc}") from None
        try:
            imported = history_import(document=document, tenant_slug=tenant, keep_ids=keep_ids)
        except ApplicationError as exc:
            raise CommandError(f"{file} not imported, nothing written ({exc.code}): {exc.message}") from None
        if json:
            self.stdout.write(_dumps({**imported.__dict__, "run_id": str(imported.run_id)}))
            return
        self.stdout.write(
            f"imported run {imported.run_id} into {imported.tenant}: {imported.events} events, "
            f"{imported.operations} operations, {imported.approvals} approvals, {imported.summaries} summaries, "
            f"{imported.snapshots} snapshots; marked imported: it never runs here (fork it to continue)"
        )


def _loads(text: str) -> Any:
    return json.loads(text)


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)
