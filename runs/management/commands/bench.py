"""python manage.py bench [--quick] [--json]: the engine's figures beside their raw baselines."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand

from runs.benchmarks import bench_all


class Command(BaseCommand):
    help = "Measure commit_step through the engine against the raw single-statement baseline."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--quick", action="store_true", help="short rounds (a smoke run, noisier figures)"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    def handle(self, *args: Any, quick: bool, json: bool, **options: Any) -> None:
        results = bench_all(quick=quick, progress=lambda line: self.stderr.write(line))
        if json:
            self.stdout.write(_dumps(results))
            return
        for name, figures in results.items():
            self.stdout.write(f"{name}: engine {figures['engine_ops_s']} ops/s vs raw {figures['raw_ops_s']} ops/s, "
                              f"ratio {figures['ratio']} (p50 {figures['p50_ms']} ms, p99 {figures['p99_ms']} ms; "
                              f"raw p50 {figures['raw_p50_ms']} ms, p99 {figures['raw_p99_ms']} ms)")  # fmt: skip


def _dumps(results: dict[str, Any]) -> str:
    return json.dumps(results, sort_keys=True)
