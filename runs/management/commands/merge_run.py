"""python manage.py merge_run RUN [--into RUN] [--actor NAME] [--json]: merge a fork back into its parent
(or another run of its tree), as POST /api/v1/runs/{id}/merge does."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from runs.engine.merges import run_merge


class Command(BaseCommand):
    help = (
        "Merge a fork's workspace (three-way, against the common fork point) and state into its parent or "
        "--into another run of its tree. Conflicts are left open for the console's merge page."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run", type=UUID, help="the run to merge (the branch)")
        parser.add_argument(
            "--into", type=UUID, default=None, help="the run to merge into (default: the parent)"
        )
        parser.add_argument("--actor", default="cli", help="who the merge event names (default cli)")
        parser.add_argument("--json", action="store_true")

    def handle(
        self, *args: Any, run: UUID, into: UUID | None, actor: str, json: bool, **options: Any
    ) -> None:
        try:
            merge = run_merge(run_id=run, into_run_id=into, actor=f"cli:{actor}")
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None
        report = {
            "merge_id": str(merge.merge_id),
            "target_run_id": str(merge.target_id),
            "status": merge.status,
            "result_seq": merge.result_seq,
            "taken": merge.taken,
            "conflicts": [{"id": c["id"], "kind": c["kind"]} for c in merge.conflicts],
        }
        if json:
            self.stdout.write(_dumps(report))
            return
        self.stdout.write(f"merge {merge.merge_id} into run {merge.target_id}: {merge.status}")
        for path, side in sorted(merge.taken.items()):
            self.stdout.write(f"  {path}: {side}")
        if merge.conflicts:
            self.stdout.write(
                f"{len(merge.conflicts)} conflict(s): resolve them on /runs/{merge.target_id}/merges/{merge.merge_id}/"
            )


def _dumps(value: Any) -> str:
    return json.dumps(value, indent=1, sort_keys=True)
