"""python manage.py chaos --runs N [--json]: kill real workers at every crash point; check the ledger."""

from __future__ import annotations

import json
import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from runs.operator.chaos import CRASH_POINTS, run_scenario, scenarios, serve_sandbox_in_thread

COLUMNS = [
    ("runs", "runs"),
    ("crashes", "crashes"),
    ("completed", "completed"),
    ("suspended", "suspended"),
    ("max_refunds_per_order", "max refunds/order"),
    ("double_refunds", "double refunds"),
    ("lost_runs", "lost runs"),
    ("mean_recovery_s", "mean recovery s"),
]


class Command(BaseCommand):
    help = "Run refund runs through real workers killed at each crash point; exit 1 if an invariant broke."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--runs", type=int, default=10, help="refund runs per scenario")
        parser.add_argument(
            "--points", default="", help=f"comma-separated subset of {','.join(CRASH_POINTS)}"
        )
        parser.add_argument("--workers", type=int, default=2)
        parser.add_argument(
            "--timeout", type=float, default=0, help="seconds per scenario (default 60 + 3/run)"
        )
        parser.add_argument(
            "--sandbox-url", default="", help="use this payments sandbox instead of serving one"
        )
        parser.add_argument("--seed", type=int, default=33)
        parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    def handle(self, *args: Any, **o: Any) -> None:
        points = [p for p in o["points"].split(",") if p]
        unknown = sorted(set(points) - set(CRASH_POINTS))
        if unknown:
            raise CommandError(f"unknown crash point(s): {', '.join(unknown)}")
        if not 1 <= o["runs"] <= 1000 or not 1 <= o["workers"] <= 16:
            raise CommandError("--runs must be 1..1000 and --workers 1..16")
        url, stop = (o["sandbox_url"], lambda: None) if o["sandbox_url"] else serve_sandbox_in_thread()
        timeout = o["timeout"] or 60 + 3 * o["runs"]
        results: dict[str, Any] = {}
        try:
            for i, scenario in enumerate(scenarios(points or None)):
                results[scenario.name] = run_scenario(
                    scenario,
                    runs=o["runs"],
                    sandbox_url=url,
                    workers=o["workers"],
                    timeout=timeout,
                    seed=o["seed"] + i,
                    progress=_progress,
                )
                sys.stderr.write("\n")
        finally:
            stop()
        broken = {name: r["broken"] for name, r in results.items() if r["broken"]}
        if o["json"]:
            self.stdout.write(
                json.dumps({"scenarios": results, "ok": not broken}, sort_keys=True, default=str)
            )
        else:
            self.stdout.write(_table(results))
        if broken:
            raise CommandError(f"invariants broken: {json.dumps(broken)}", returncode=1)


def _progress(name: str, settled: int, total: int, crashes: int) -> None:
    width = 30
    filled = int(width * settled / max(total, 1))
    sys.stderr.write(
        f"\r{name:<28} [{'#' * filled}{'.' * (width - filled)}] {settled}/{total} settled, {crashes} crashes"
    )
    sys.stderr.flush()


def _table(results: dict[str, Any]) -> str:
    header = ["scenario", *[title for _, title in COLUMNS], "result"]
    rows = [
        [
            name,
            *[str(r[key] if r[key] is not None else "-") for key, _ in COLUMNS],
            "ok" if not r["broken"] else "BROKEN: " + "; ".join(r["broken"]),
        ]
        for name, r in results.items()
    ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in [header, *rows]]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])
