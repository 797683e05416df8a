"""python manage.py replay_check FILES...: would the deployed code make the moves these histories made?

Each file is a history written by `export_history`. Every recorded step is run again by the current
code on its recorded state, with operations, approvals and signals answered from the record (nothing
is sent); the first move that differs is printed with its seq, and the command exits 1.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runs.authoring.replay import replay_file


class Command(BaseCommand):
    help = (
        "Replay recorded histories (export_history files) against the current code; exit 1 on a divergence."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("files", nargs="+", metavar="FILE")

    def handle(self, *args: Any, files: list[str], **options: Any) -> None:
        diverged = []
        for path in files:
            try:
                report = replay_file(path)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise CommandError(f"{path}: not a history export_history wrote ({exc})") from None
            self.stdout.write(f"{path}: {report.summary()}")
            if not report.ok:
                diverged.append(path)
        if diverged:
            raise CommandError(
                f"{len(diverged)} of {len(files)} histories diverge from the current code: "
                + ", ".join(diverged)
                + "; runs waiting in production with such a history would not continue as they started"
            )
