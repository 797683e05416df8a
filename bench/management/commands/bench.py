"""python manage.py bench [--quick] [--json]: the engine's figures beside their raw baselines."""

from __future__ import annotations

import json
import os
from typing import Any
from unittest import mock

from django.core.management.base import BaseCommand, CommandError
from django.test import override_settings

from bench.suite import bench_all


class Command(BaseCommand):
    help = "Measure commit_step through the engine against the raw single-statement baseline."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument(
            "--quick", action="store_true", help="short rounds (a smoke run, noisier figures)"
        )
        parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
        parser.add_argument(
            "--only",
            action="append",
            default=None,
            metavar="NAME",
            help="run only this benchmark (repeatable): commit_step, run_e2e, context_build, context, memory_search, retrieval_search, console_pages, langgraph_put, pooled_steps, scaling",
        )

    def handle(self, *args: Any, quick: bool, json: bool, only: list[str] | None, **options: Any) -> None:
        # Measured as production runs Keeper: with DEBUG on (manage.py's local default) Django wraps
        # every query in its debug cursor and keeps a log of them, which the peers measured beside
        # Keeper never pay. The worker processes a benchmark starts inherit the environment (put back
        # afterwards, for a caller such as a test).
        try:
            with override_settings(DEBUG=False), mock.patch.dict(os.environ, {"DEBUG": "false"}):
                results = bench_all(quick=quick, progress=lambda line: self.stderr.write(line), only=only)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        if json:
            self.stdout.write(_dumps(results))
            return
        for name, figures in results.items():
            self.stdout.write(f"{name}:")
            for key, value in figures.items():
                self.stdout.write(f"  {key}: {value}")


def _dumps(results: dict[str, Any]) -> str:
    return json.dumps(results, sort_keys=True)
