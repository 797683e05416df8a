"""Measure a workspace snapshot's cost and print the snapshot interval chapter 39's model chooses."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from runs.engine.workspace import bench_snapshot, workspace_snapshot_interval


class Command(BaseCommand):
    help = "Time a workspace snapshot (artifact_put of the changed files + the manifest) and print N."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--files", type=int, default=20)
        parser.add_argument("--file-bytes", type=int, default=4096)
        parser.add_argument("--changed", type=int, default=1)
        parser.add_argument("--rounds", type=int, default=200)
        parser.add_argument("--step-cost-s", type=float, default=2.0, help="a step's cost to redo")
        parser.add_argument("--failure-rate", type=float, default=0.001, help="crashes per step")

    def handle(self, *args: Any, **options: Any) -> None:
        if min(options["files"], options["file_bytes"], options["rounds"]) < 1 or not (
            0 <= options["changed"] <= options["files"]
        ):
            self.stderr.write("files, file-bytes and rounds must be >= 1, and changed between 0 and files")
            raise SystemExit(2)
        figures = bench_snapshot(
            files=options["files"],
            file_bytes=options["file_bytes"],
            changed=options["changed"],
            rounds=options["rounds"],
        )
        cost = figures["put_s"] + figures["db_s"]
        step, rate = options["step_cost_s"], options["failure_rate"]
        n = workspace_snapshot_interval(snapshot_cost_s=cost, step_cost_s=step, failure_rate=rate)
        self.stdout.write(
            f"workspace of {options['files']} files x {options['file_bytes']} B, {options['changed']} changed "
            f"per snapshot, {options['rounds']} rounds\n"
            f"  blobs + manifest: {figures['put_s'] * 1000:.3f} ms   manifest row: {figures['db_s'] * 1000:.3f} ms\n"
            f"  snapshot cost C = {cost * 1000:.3f} ms; step cost s = {step} s; failure rate p = {rate}/step\n"
            f"  interval N = sqrt(2C/(p*s)) = {n} steps (expected redo per crash {n / 2 * step:.1f} s, "
            f"snapshot overhead per step {cost / n * 1000:.3f} ms)"
        )
