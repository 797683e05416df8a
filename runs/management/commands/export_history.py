"""python manage.py export_history RUN_ID [--output FILE]: a run's whole history as one JSON document.

The run row, every event (with state) in seq order, its operations with their history, approvals,
summaries and retrieval snapshots, a format version and a digest of the content. The top-level
`workflow`, `workflow_version`, `status` and `events` keep the replay fixtures' format.
`import_history` reads it back.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from runs.operator.history import run_history_document


class Command(BaseCommand):
    help = "Print (or write) a run's whole history as one JSON document, with a format version and a digest."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run_id")
        parser.add_argument("--output", "-o", default=None, help="write to this file instead of stdout")

    def handle(self, *args: Any, run_id: str, output: str | None, **options: Any) -> None:
        try:
            document = run_history_document(run_id=uuid.UUID(run_id))
        except (ApplicationError, ValueError) as exc:
            raise CommandError(f"no run {run_id!r}: {getattr(exc, 'message', exc)}") from None
        text = json.dumps(document, indent=1, sort_keys=True)
        if output is None:
            self.stdout.write(text)
            return
        try:
            Path(output).write_text(text + "\n")
        except OSError as exc:
            raise CommandError(f"cannot write {output}: {exc.strerror}") from None
        self.stdout.write(
            f"run {run_id}: {len(document['events'])} events written to {output} ({document['digest']})"
        )
