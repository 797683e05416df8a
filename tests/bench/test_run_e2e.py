"""bench run_e2e: whole runs through real worker processes, counted and timed from their events,
with DBOS beside them when the peers extra is installed."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from bench.peers import dbos_missing
from bench.runs import bench_run_e2e
from tests.processes import flush_redis

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True, databases=["default", "owner"])]

KEYS = {"steps", "runs", "p50_run_ms", "steps_per_s", "dbos_steps_per_s", "ratio_vs_dbos"}


@pytest.fixture(autouse=True)
def _clean_broker():
    flush_redis()
    yield
    flush_redis()


def test_steps_and_times_come_from_the_runs_events() -> None:
    lines: list[str] = []
    figures = bench_run_e2e(runs=3, n=4, sequential=2, rounds=2, progress=lines.append)
    # 4 ticks + start + finish: the steps are the events the runs committed, not a constant
    assert (figures["runs"], figures["steps"]) == (3, 18)
    assert (figures["single_runs"], figures["single_steps"]) == (2, 12)
    assert (
        figures["p50_run_ms"] > 0 and figures["steps_per_s"] > 0 and len(figures["steps_per_s_rounds"]) == 2
    )
    assert figures["slice_steps"] == 100 and figures["dbos_processes"] == 2
    # what a step cost: the worker process and the embedded server (a process of this machine)
    assert figures["worker_cpu_ms_per_step"] > 0 and figures["postgres_cpu_ms_per_step"] > 0
    assert any("CPU per step: worker" in line for line in lines)
    # the worker make run starts: the settings' pool and concurrency
    assert (figures["worker_pool"], figures["worker_concurrency"]) == ("threads", 16)
    if dbos_missing() is None:
        # counted from DBOS's own rows: one operation output per step, 6 steps per workflow
        assert figures["dbos_steps"] == figures["dbos_threads_steps"] == 18
        assert figures["dbos_steps_per_s"] > 0 and figures["dbos_p50_run_ms"] > 0
        assert figures["dbos_threads_steps_per_s"] > 0 and len(figures["dbos_steps_per_s_rounds"]) == 2
        assert figures["ratio_vs_dbos"] == round(figures["steps_per_s"] / figures["dbos_steps_per_s"], 2)
    else:
        assert figures["dbos_steps_per_s"] is None and figures["ratio_vs_dbos"] is None
        assert "not installed" in figures["dbos_note"] and any("not installed" in line for line in lines)


def test_the_command_prints_the_run_e2e_figures_as_json() -> None:
    out = io.StringIO()
    call_command("bench", "--only", "run_e2e", "--quick", "--json", stdout=out, stderr=io.StringIO())
    figures = json.loads(out.getvalue())["run_e2e"]
    assert set(figures) >= KEYS
    assert (figures["runs"], figures["steps"]) == (10, 10 * 22)
    assert figures["p50_run_ms"] > 0 and figures["steps_per_s"] > 0
