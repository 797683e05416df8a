"""python manage.py evaluate SET --tenant SLUG [--override model=rules-no-refunds] [--prompt TEXT]
[--canned FILE] [--wait SECONDS] [--inline] [--json]; also --create, --add RUN[@SEQ], --run RUN[@SEQ]."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any
from uuid import UUID

from django.core.management.base import BaseCommand, CommandError

from core.errors import ApplicationError
from core.tenancy import tenant_bind, tenant_get
from runs.engine.steps import run_advance
from runs.evaluation.overrides import overrides_from_pairs
from runs.evaluation.selectors import AWAITING_INPUT, round_table
from runs.evaluation.services import (
    eval_round_start,
    eval_set_create,
    eval_set_get,
    eval_set_run_add,
    replay_feed,
)
from runs.evaluation.table import round_table_text
from runs.operator.arguments import SECONDS


def _run_at(text: str) -> tuple[UUID, int | None]:
    run, _, seq = text.partition("@")
    try:
        return UUID(run), int(seq) if seq else None
    except ValueError:
        raise CommandError(f"{text!r} is not RUN_ID or RUN_ID@SEQ") from None


class Command(BaseCommand):
    help = "Replay an evaluation set (or one run) with overrides, wait for the replays, print the table."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("set", nargs="?", help="the evaluation set's name (omit with --run)")
        parser.add_argument("--tenant", default="demo", help="the tenant's slug or id")
        parser.add_argument("--create", action="store_true", help="create the set (with --add to fill it)")
        parser.add_argument(
            "--add", action="append", default=[], metavar="RUN[@SEQ]", help="keep a run in the set"
        )
        parser.add_argument("--run", metavar="RUN[@SEQ]", help="replay this one run instead of a set")
        parser.add_argument(
            "--override", action="append", default=[], metavar="NAME=VALUE",
            help="model=rules|rules-no-refunds|model, model.model=NAME, model.base_url=URL, compactor=..., decider=...",
        )  # fmt: skip
        parser.add_argument("--prompt", help="the system prompt the replays use")
        parser.add_argument("--canned", type=Path, help="a JSON file of tools' canned answers")
        parser.add_argument("--label", default="")
        parser.add_argument("--wait", type=SECONDS, default=120.0, help="seconds to wait for the replays")
        parser.add_argument("--inline", action="store_true", help="advance the replays in this process")
        parser.add_argument("--json", action="store_true", help="print the table as JSON")

    def handle(self, *args: Any, **o: Any) -> None:
        try:
            tenant = tenant_get(slug_or_id=o["tenant"])
            with tenant_bind(tenant.tenant_id):
                self._handle(tenant, o)
        except ApplicationError as exc:
            raise CommandError(f"{exc.code}: {exc.message}") from None

    def _handle(self, tenant: Any, o: dict[str, Any]) -> None:
        overrides = overrides_from_pairs(o["override"])
        if o["prompt"] is not None:
            overrides["prompt"] = o["prompt"]
        if o["canned"] is not None:
            try:
                overrides["tools"] = json.loads(o["canned"].read_text())
            except (OSError, ValueError) as exc:
                raise CommandError(f"--canned: {exc}") from None
        eval_set = None
        if o["set"]:
            if o["create"]:
                eval_set = eval_set_create(tenant=tenant, name=o["set"], actor="cli")
                self.stderr.write(f"created evaluation set {eval_set.name}")
            else:
                eval_set = eval_set_get(tenant=tenant, name=o["set"])
            for added in o["add"]:
                kept, at = _run_at(added)
                eval_set_run_add(eval_set=eval_set, run_id=kept, at_seq=at, actor="cli")
                self.stderr.write(f"kept run {kept} in {eval_set.name}")
            if o["create"] and not o["override"] and o["prompt"] is None and o["canned"] is None:
                return  # creating and filling a set runs nothing
        elif not o["run"]:
            raise CommandError("name an evaluation set, or --run RUN_ID")
        run_id: UUID | None = None
        seq: int | None = None
        if o["run"]:
            run_id, seq = _run_at(o["run"])
        eval_round = eval_round_start(
            actor="cli", overrides=overrides, eval_set=eval_set, run_id=run_id, at_seq=seq, label=o["label"]
        )
        self.stderr.write(f"round {eval_round.round_id}: replays started")
        deadline = time.monotonic() + o["wait"]
        table = round_table(eval_round=eval_round)
        while not table.settled and time.monotonic() < deadline:
            for row in table.rows:  # fed at once after it waits, unless its worker died in between
                if (
                    row.unfed
                    and row.replay.suspend_reason == AWAITING_INPUT
                    and not row.replay.resume_requested
                ):
                    replay_feed(row.replay_run_id)
            if o["inline"]:
                for row in table.rows:
                    if not row.settled:
                        run_advance(run_id=row.replay_run_id, worker_id="evaluate-cli")
            else:
                time.sleep(0.5)
            table = round_table(eval_round=eval_round)
            done = sum(c.settled for c in table.rows)
            self.stderr.write(f"  {done}/{len(table.rows)} replays settled")
        if o["json"]:
            self.stdout.write(json.dumps(table.as_dict(), default=str))
        else:
            self.stdout.write(round_table_text(table))
        if not table.settled:
            raise CommandError(
                f"not every replay settled within {o['wait']:g} s (round {eval_round.round_id})"
            )
